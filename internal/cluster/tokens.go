package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Tokens is the set of API tokens every API server accepts, kept in etcd as
// SHA-256 digests and followed by a watch.
type Tokens struct {
	cli *clientv3.Client
	k   keys
	log *slog.Logger

	mu      sync.RWMutex
	digests map[string]bool
}

// tokenRecord is the value under tokens/DIGEST.
type tokenRecord struct {
	CreatedAt time.Time `json:"created_at"`
	CreatedBy string    `json:"created_by,omitempty"`
}

// OpenTokens loads the token set and follows it until ctx ends. When the cluster
// has no token yet, the first API server to get here creates one (the token in
// tokenFile if that file exists, else a new random one), stores its digest and
// writes the token to tokenFile; every other API server leaves tokenFile alone.
func OpenTokens(ctx context.Context, cli *clientv3.Client, prefix, tokenFile, by string, log *slog.Logger) (*Tokens, error) {
	if log == nil {
		log = slog.Default()
	}
	t := &Tokens{cli: cli, k: newKeys(prefix), log: log, digests: map[string]bool{}}
	if err := t.bootstrap(ctx, tokenFile, by); err != nil {
		return nil, err
	}
	rev, err := t.list(ctx)
	if err != nil {
		return nil, err
	}
	go t.follow(ctx, rev)
	return t, nil
}

func (t *Tokens) bootstrap(ctx context.Context, tokenFile, by string) error {
	tok := ""
	if b, err := os.ReadFile(tokenFile); err == nil {
		tok = strings.TrimSpace(string(b))
	}
	fromFile := tok != ""
	if !fromFile {
		var raw [24]byte
		if _, err := rand.Read(raw[:]); err != nil {
			return err
		}
		tok = hex.EncodeToString(raw[:])
	}
	rec, _ := json.Marshal(tokenRecord{CreatedAt: time.Now().UTC(), CreatedBy: by})
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := t.cli.Txn(cctx).
		If(clientv3.Compare(clientv3.CreateRevision(t.k.tokensInit()), "=", 0)).
		Then(clientv3.OpPut(t.k.tokensInit(), by), clientv3.OpPut(t.k.token(digest(tok)), string(rec))).
		Commit()
	if err != nil {
		return fmt.Errorf("cluster: bootstrap the API token: %w", err)
	}
	if !resp.Succeeded {
		return nil // the cluster has its first token already
	}
	if !fromFile {
		if err := os.WriteFile(tokenFile, []byte(tok+"\n"), 0o600); err != nil {
			return fmt.Errorf("cluster: write the token: %w", err)
		}
	}
	t.log.Info("created the cluster's first API token", "token_file", tokenFile)
	return nil
}

func (t *Tokens) list(ctx context.Context) (int64, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := t.cli.Get(cctx, t.k.tokens(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return 0, fmt.Errorf("cluster: list API tokens: %w", err)
	}
	d := make(map[string]bool, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		d[strings.TrimPrefix(string(kv.Key), t.k.tokens())] = true
	}
	t.mu.Lock()
	t.digests = d
	t.mu.Unlock()
	return resp.Header.Revision, nil
}

func (t *Tokens) follow(ctx context.Context, rev int64) {
	for ctx.Err() == nil {
		ch := t.cli.Watch(clientv3.WithRequireLeader(ctx), t.k.tokens(), clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithKeysOnly())
		for resp := range ch {
			if resp.Err() != nil {
				break
			}
			t.mu.Lock()
			for _, ev := range resp.Events {
				d := strings.TrimPrefix(string(ev.Kv.Key), t.k.tokens())
				if ev.Type == clientv3.EventTypeDelete {
					delete(t.digests, d)
				} else {
					t.digests[d] = true
				}
			}
			t.mu.Unlock()
			rev = resp.Header.Revision
		}
		for ctx.Err() == nil {
			r, err := t.list(ctx)
			if err == nil {
				rev = r
				break
			}
			t.log.Warn("listing API tokens failed; retrying", "err", err)
			sleep(ctx, time.Second)
		}
	}
}

// Match reports whether tok is one of the cluster's tokens (an empty token
// matches nothing). Only digests are compared, so timing tells nothing about a
// token.
func (t *Tokens) Match(tok string) bool {
	if tok == "" {
		return false
	}
	d := digest(tok)
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.digests[d]
}

// Add stores a new token's digest (for operators: every API server accepts it
// within a watch round trip).
func (t *Tokens) Add(ctx context.Context, tok, by string) error {
	if len(tok) < 16 {
		return fmt.Errorf("cluster: an API token needs at least 16 characters")
	}
	rec, _ := json.Marshal(tokenRecord{CreatedAt: time.Now().UTC(), CreatedBy: by})
	_, err := t.cli.Put(ctx, t.k.token(digest(tok)), string(rec))
	return err
}
