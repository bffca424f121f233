package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// mirror keeps the keys under one prefix in memory, decoded, by a list and
// then a watch (relisting when the watch breaks).
type mirror[T any] struct {
	cli    *clientv3.Client
	prefix string
	decode func([]byte) (T, error)
	log    *slog.Logger

	mu sync.RWMutex
	kv map[string]mirrored[T] // key without the prefix → value
}

// mirrored is one key's decoded value and its mod revision.
type mirrored[T any] struct {
	val T
	rev int64
}

// openMirror lists prefix and follows it until ctx ends.
func openMirror[T any](ctx context.Context, cli *clientv3.Client, prefix string, decode func([]byte) (T, error), log *slog.Logger) (*mirror[T], error) {
	m := &mirror[T]{cli: cli, prefix: prefix, decode: decode, log: log, kv: map[string]mirrored[T]{}}
	rev, err := m.list(ctx)
	if err != nil {
		return nil, err
	}
	go m.follow(ctx, rev)
	return m, nil
}

func (m *mirror[T]) list(ctx context.Context) (int64, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := m.cli.Get(cctx, m.prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("cluster: list %s: %w", m.prefix, err)
	}
	kv := make(map[string]mirrored[T], len(resp.Kvs))
	for _, e := range resp.Kvs {
		if v, err := m.decode(e.Value); err == nil {
			kv[strings.TrimPrefix(string(e.Key), m.prefix)] = mirrored[T]{v, e.ModRevision}
		}
	}
	m.mu.Lock()
	m.kv = kv
	m.mu.Unlock()
	return resp.Header.Revision, nil
}

func (m *mirror[T]) follow(ctx context.Context, rev int64) {
	for ctx.Err() == nil {
		ch := m.cli.Watch(clientv3.WithRequireLeader(ctx), m.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		for resp := range ch {
			if resp.Err() != nil {
				break
			}
			m.mu.Lock()
			for _, ev := range resp.Events {
				k := strings.TrimPrefix(string(ev.Kv.Key), m.prefix)
				if ev.Type == clientv3.EventTypeDelete {
					delete(m.kv, k)
				} else if v, err := m.decode(ev.Kv.Value); err == nil {
					m.kv[k] = mirrored[T]{v, ev.Kv.ModRevision}
				}
			}
			m.mu.Unlock()
			rev = resp.Header.Revision
		}
		for ctx.Err() == nil {
			r, err := m.list(ctx)
			if err == nil {
				rev = r
				break
			}
			m.log.Warn("listing failed; retrying", "prefix", m.prefix, "err", err)
			sleep(ctx, time.Second)
		}
	}
}

// get returns key's value and mod revision (ok false: absent).
func (m *mirror[T]) get(key string) (T, int64, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, ok := m.kv[key]
	return e.val, e.rev, ok
}

// each calls f for every key (under the read lock: f must not call back).
func (m *mirror[T]) each(f func(key string, v T)) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for k, e := range m.kv {
		f(k, e.val)
	}
}
