package buildstate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/e2bapi"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/pkg/api"
)

// DefaultRunnerTTL is the lease TTL that holds a running build's runner key:
// a build whose API server died is ended as an error at most this long after.
const DefaultRunnerTTL = 10 * time.Second

// MaxEtcdFiles is the largest upload kept in etcd itself, when the cluster
// has no blob store.
const MaxEtcdFiles = 32 << 20

// etcdChunk is the size of one etcd value of files kept in etcd.
const etcdChunk = 512 << 10

// maxTxnPuts bounds the operations of one transaction (etcd's default
// --max-txn-ops is 128).
const maxTxnPuts = 100

// EtcdConfig configures an Etcd store.
type EtcdConfig struct {
	Client *clientv3.Client
	Prefix string // the cluster's key prefix (default "/dsec/")
	// Blobs holds uploaded files (the cluster's blob store); nil keeps them
	// in etcd, up to MaxEtcdFiles each.
	Blobs blob.Store
	// Runner names this process in the builds it runs.
	Runner string
	// RunnerTTL is the lease TTL of the builds this process runs (default
	// DefaultRunnerTTL, at least 2 s).
	RunnerTTL time.Duration
	Logger    *slog.Logger
}

// Etcd keeps builds in etcd, under PREFIX/e2b/: build/ID (the record, JSON),
// build/ID/n (how many log entries), build/ID/log/OFFSET (an entry),
// build/ID/runner (the running API server, held by its session lease: when
// it is gone while the record says building, the runner died), and
// files/HASH (where the uploaded tar is: a blob of the blob store, or
// chunks files/HASH/N in etcd). Everything but the runner key lives under a
// lease of Retention.
type Etcd struct {
	cfg    EtcdConfig
	prefix string
	// ctx holds the runner sessions (not the client's context, which may
	// be the one it was connected under); Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	sess   *concurrency.Session
}

// NewEtcd returns a store over cfg.Client.
func NewEtcd(cfg EtcdConfig) *Etcd {
	p := cfg.Prefix
	if p == "" {
		p = "/dsec/"
	}
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	if cfg.RunnerTTL <= 0 {
		cfg.RunnerTTL = DefaultRunnerTTL
	}
	cfg.RunnerTTL = max(cfg.RunnerTTL, 2*time.Second)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Etcd{cfg: cfg, prefix: p + "e2b/", ctx: ctx, cancel: cancel}
}

func (e *Etcd) record(id string) string       { return e.prefix + "build/" + id }
func (e *Etcd) count(id string) string        { return e.record(id) + "/n" }
func (e *Etcd) logs(id string) string         { return e.record(id) + "/log/" }
func (e *Etcd) entry(id string, n int) string { return fmt.Sprintf("%s%09d", e.logs(id), n) }
func (e *Etcd) runner(id string) string       { return e.record(id) + "/runner" }
func (e *Etcd) files(hash string) string      { return e.prefix + "files/" + hash }
func (e *Etcd) chunk(hash string, n int) string {
	return fmt.Sprintf("%s/%06d", e.files(hash), n)
}

// unavailable classifies an etcd error.
func unavailable(err error, what string) error {
	return errdefs.Wrap(api.CodeUnavailable, err, "%s: cluster store", what)
}

// session is this process's runner session (a new one when the last one's
// lease was lost).
func (e *Etcd) session() (*concurrency.Session, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sess != nil {
		select {
		case <-e.sess.Done():
			e.sess = nil
		default:
			return e.sess, nil
		}
	}
	s, err := concurrency.NewSession(e.cfg.Client, concurrency.WithTTL(int(e.cfg.RunnerTTL/time.Second)),
		concurrency.WithContext(e.ctx))
	if err != nil {
		return nil, unavailable(err, "template build runner lease")
	}
	e.sess = s
	return s, nil
}

// Create implements Store.
func (e *Etcd) Create(ctx context.Context, id string, r Record) error {
	r.Status = e2bapi.TemplateBuildStatusWaiting
	b, err := json.Marshal(r)
	if err != nil {
		return errdefs.Internal(err, "template build record")
	}
	l, err := e.cfg.Client.Grant(ctx, int64(Retention/time.Second))
	if err != nil {
		return unavailable(err, "template build record")
	}
	resp, err := e.cfg.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(e.record(id)), "=", 0)).
		Then(clientv3.OpPut(e.record(id), string(b), clientv3.WithLease(l.ID)),
			clientv3.OpPut(e.count(id), "0", clientv3.WithLease(l.ID))).Commit()
	if err != nil {
		return unavailable(err, "template build record")
	}
	if !resp.Succeeded {
		return errdefs.New(api.CodeConflict, "template build %q exists", id)
	}
	return nil
}

// get reads a record and its revision.
func (e *Etcd) get(ctx context.Context, id string) (Record, int64, error) {
	resp, err := e.cfg.Client.Get(ctx, e.record(id))
	if err != nil {
		return Record{}, 0, unavailable(err, "template build record")
	}
	if len(resp.Kvs) == 0 {
		return Record{}, 0, notFound(id)
	}
	var r Record
	if err := json.Unmarshal(resp.Kvs[0].Value, &r); err != nil {
		return Record{}, 0, errdefs.Internal(err, "template build record %s", id)
	}
	return r, resp.Kvs[0].ModRevision, nil
}

// Get implements Store: a building record without its runner key is an
// orphan, ended here.
func (e *Etcd) Get(ctx context.Context, id string) (Record, error) {
	for {
		r, rev, err := e.get(ctx, id)
		if err != nil || r.Status != e2bapi.TemplateBuildStatusBuilding {
			return r, err
		}
		resp, err := e.cfg.Client.Get(ctx, e.runner(id), clientv3.WithCountOnly())
		if err != nil {
			return r, unavailable(err, "template build runner")
		}
		if resp.Count > 0 {
			return r, nil
		}
		msg := fmt.Sprintf("unavailable: the API server running the build (%s) stopped before the build ended", r.Runner)
		entry := e2bapi.BuildLogEntry{Timestamp: time.Now().UTC(), Level: e2bapi.LogLevelError, Message: msg}
		entries := []e2bapi.BuildLogEntry{entry}
		r.Status, r.Ended = e2bapi.TemplateBuildStatusError, entry.Timestamp
		r.Reason = &e2bapi.BuildStatusReason{Message: msg, LogEntries: &entries}
		ok, err := e.update(ctx, id, rev, r, clientv3.Compare(clientv3.CreateRevision(e.runner(id)), "=", 0))
		if err != nil {
			return r, err
		}
		if ok {
			e.cfg.Logger.InfoContext(ctx, "e2b template build orphaned: its runner is gone", "build", id, "runner", r.Runner)
			if err := e.Log(ctx, id, entry); err != nil {
				e.cfg.Logger.WarnContext(ctx, "e2b template build: logging the orphan", "build", id, "err", err)
			}
			return r, nil
		}
	}
}

// update puts r over the record at revision rev (false: it changed), with
// more conditions and operations.
func (e *Etcd) update(ctx context.Context, id string, rev int64, r Record, cond clientv3.Cmp, ops ...clientv3.Op) (bool, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return false, errdefs.Internal(err, "template build record")
	}
	ops = append(ops, clientv3.OpPut(e.record(id), string(b), clientv3.WithIgnoreLease()))
	resp, err := e.cfg.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(e.record(id)), "=", rev), cond).
		Then(ops...).Commit()
	if err != nil {
		return false, unavailable(err, "template build record")
	}
	return resp.Succeeded, nil
}

// Start implements Store.
func (e *Etcd) Start(ctx context.Context, id string) error {
	s, err := e.session()
	if err != nil {
		return err
	}
	for {
		r, rev, err := e.get(ctx, id)
		if err != nil {
			return err
		}
		if r.Status != e2bapi.TemplateBuildStatusWaiting {
			return errdefs.New(api.CodeConflict, "build %q already started", id)
		}
		r.Status, r.Started, r.Runner = e2bapi.TemplateBuildStatusBuilding, time.Now().UTC(), e.cfg.Runner
		ok, err := e.update(ctx, id, rev, r, clientv3.Compare(clientv3.CreateRevision(e.runner(id)), "=", 0),
			clientv3.OpPut(e.runner(id), e.cfg.Runner, clientv3.WithLease(s.Lease())))
		if err != nil || ok {
			return err
		}
	}
}

// Log implements Store.
func (e *Etcd) Log(ctx context.Context, id string, entries ...e2bapi.BuildLogEntry) error {
	for len(entries) > 0 {
		batch := entries[:min(len(entries), maxTxnPuts)]
		if err := e.logBatch(ctx, id, batch); err != nil {
			return err
		}
		entries = entries[len(batch):]
	}
	return nil
}

func (e *Etcd) logBatch(ctx context.Context, id string, entries []e2bapi.BuildLogEntry) error {
	for {
		resp, err := e.cfg.Client.Get(ctx, e.count(id))
		if err != nil {
			return unavailable(err, "template build log")
		}
		if len(resp.Kvs) == 0 {
			return notFound(id)
		}
		kv := resp.Kvs[0]
		n, err := strconv.Atoi(string(kv.Value))
		if err != nil {
			return errdefs.Internal(err, "template build log count")
		}
		add := appendCapped(n, entries)
		if len(add) == 0 {
			return nil
		}
		ops := make([]clientv3.Op, 0, len(add)+1)
		for i, en := range add {
			b, err := json.Marshal(en)
			if err != nil {
				return errdefs.Internal(err, "template build log")
			}
			ops = append(ops, clientv3.OpPut(e.entry(id, n+i), string(b), clientv3.WithLease(clientv3.LeaseID(kv.Lease))))
		}
		ops = append(ops, clientv3.OpPut(e.count(id), strconv.Itoa(n+len(add)), clientv3.WithIgnoreLease()))
		tr, err := e.cfg.Client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(e.count(id)), "=", kv.ModRevision)).
			Then(ops...).Commit()
		if err != nil {
			return unavailable(err, "template build log")
		}
		if tr.Succeeded {
			return nil
		}
	}
}

// Logs implements Store.
func (e *Etcd) Logs(ctx context.Context, id string, offset int) ([]e2bapi.BuildLogEntry, error) {
	resp, err := e.cfg.Client.Get(ctx, e.entry(id, offset), clientv3.WithRange(clientv3.GetPrefixRangeEnd(e.logs(id))))
	if err != nil {
		return nil, unavailable(err, "template build log")
	}
	out := make([]e2bapi.BuildLogEntry, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var en e2bapi.BuildLogEntry
		if err := json.Unmarshal(kv.Value, &en); err != nil {
			return nil, errdefs.Internal(err, "template build log entry")
		}
		out = append(out, en)
	}
	return out, nil
}

// Finish implements Store.
func (e *Etcd) Finish(ctx context.Context, id string, status e2bapi.TemplateBuildStatus, reason *e2bapi.BuildStatusReason) error {
	for {
		r, rev, err := e.get(ctx, id)
		if err != nil {
			return err
		}
		if r.Status != e2bapi.TemplateBuildStatusBuilding {
			return errdefs.New(api.CodeConflict, "build %q is %s, not building", id, r.Status)
		}
		r.Status, r.Reason, r.Ended = status, reason, time.Now().UTC()
		ok, err := e.update(ctx, id, rev, r, clientv3.Compare(clientv3.Version(e.record(id)), ">", 0), clientv3.OpDelete(e.runner(id)))
		if err != nil || ok {
			return err
		}
	}
}

// filesMeta is where an upload is.
type filesMeta struct {
	Digest string `json:"digest,omitempty"` // a blob of the blob store
	Chunks int    `json:"chunks,omitempty"` // else chunks in etcd
	Size   int64  `json:"size"`
}

// PutFiles implements Store.
func (e *Etcd) PutFiles(ctx context.Context, hash string, r io.Reader, size int64) error {
	if e.cfg.Blobs == nil && size > MaxEtcdFiles {
		return errdefs.New(api.CodeResourceExhausted, "template files of %d bytes: a cluster without a blob store (--blob-store) keeps at most %d bytes per upload", size, MaxEtcdFiles)
	}
	l, err := e.cfg.Client.Grant(ctx, int64(Retention/time.Second))
	if err != nil {
		return unavailable(err, "template files")
	}
	var meta filesMeta
	if e.cfg.Blobs != nil {
		if meta, err = e.putBlob(ctx, r); err != nil {
			return err
		}
	} else if meta, err = e.putChunks(ctx, hash, r, l.ID); err != nil {
		return err
	}
	b, _ := json.Marshal(meta)
	if _, err := e.cfg.Client.Put(ctx, e.files(hash), string(b), clientv3.WithLease(l.ID)); err != nil {
		return unavailable(err, "template files")
	}
	return nil
}

// putBlob stores r in the blob store under its digest.
func (e *Etcd) putBlob(ctx context.Context, r io.Reader) (filesMeta, error) {
	f, err := os.CreateTemp("", "dsec-e2b-upload-*")
	if err != nil {
		return filesMeta{}, errdefs.Internal(err, "template upload")
	}
	defer func() { _ = f.Close(); _ = os.Remove(f.Name()) }()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), r)
	if err != nil {
		return filesMeta{}, errdefs.Internal(err, "template upload")
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return filesMeta{}, errdefs.Internal(err, "template upload")
	}
	d := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if err := e.cfg.Blobs.Put(ctx, d, f, n); err != nil {
		return filesMeta{}, fmt.Errorf("template files to the blob store: %w", err)
	}
	return filesMeta{Digest: d, Size: n}, nil
}

// putChunks stores r in etcd values of etcdChunk bytes.
func (e *Etcd) putChunks(ctx context.Context, hash string, r io.Reader, lease clientv3.LeaseID) (filesMeta, error) {
	var meta filesMeta
	buf := make([]byte, etcdChunk)
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if meta.Size += int64(n); meta.Size > MaxEtcdFiles {
				return meta, errdefs.New(api.CodeResourceExhausted, "template files: a cluster without a blob store (--blob-store) keeps at most %d bytes per upload", MaxEtcdFiles)
			}
			if _, err := e.cfg.Client.Put(ctx, e.chunk(hash, meta.Chunks), string(buf[:n]), clientv3.WithLease(lease)); err != nil {
				return meta, unavailable(err, "template files")
			}
			meta.Chunks++
		}
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			return meta, nil
		case err != nil:
			return meta, errdefs.Internal(err, "template upload")
		}
	}
}

func (e *Etcd) meta(ctx context.Context, hash string) (filesMeta, bool, error) {
	resp, err := e.cfg.Client.Get(ctx, e.files(hash))
	if err != nil {
		return filesMeta{}, false, unavailable(err, "template files")
	}
	if len(resp.Kvs) == 0 {
		return filesMeta{}, false, nil
	}
	var m filesMeta
	if err := json.Unmarshal(resp.Kvs[0].Value, &m); err != nil {
		return m, false, errdefs.Internal(err, "template files record")
	}
	return m, true, nil
}

// HasFiles implements Store.
func (e *Etcd) HasFiles(ctx context.Context, hash string) (bool, error) {
	_, ok, err := e.meta(ctx, hash)
	return ok, err
}

// OpenFiles implements Store.
func (e *Etcd) OpenFiles(ctx context.Context, hash string) (io.ReadCloser, error) {
	m, ok, err := e.meta(ctx, hash)
	switch {
	case err != nil:
		return nil, err
	case !ok:
		return nil, errdefs.New(api.CodeNotFound, "no files uploaded under hash %s", hash)
	case m.Digest != "":
		if e.cfg.Blobs == nil {
			return nil, errdefs.New(api.CodeUnavailable, "template files %s are in the blob store, and this API server has none (--blob-store)", hash)
		}
		return e.cfg.Blobs.Open(ctx, m.Digest)
	}
	var buf bytes.Buffer
	for i := range m.Chunks {
		resp, err := e.cfg.Client.Get(ctx, e.chunk(hash, i))
		if err != nil {
			return nil, unavailable(err, "template files")
		}
		if len(resp.Kvs) == 0 {
			return nil, errdefs.New(api.CodeNotFound, "template files %s: chunk %d is gone", hash, i)
		}
		buf.Write(resp.Kvs[0].Value)
	}
	return io.NopCloser(&buf), nil
}

// Close ends this process's runner session: the builds it still ran are
// orphans for the next reader.
func (e *Etcd) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	defer e.cancel()
	if e.sess == nil {
		return nil
	}
	err := e.sess.Close()
	e.sess = nil
	return err
}
