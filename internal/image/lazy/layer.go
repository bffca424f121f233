package lazy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/pkg/api"
)

// The FUSE file system (fuseFS): the root holds one read-only regular file per
// layer blob, named by the digest's hex. A read fetches only the chunks it
// overlaps (through the chunk cache), so the erofs mount above it pulls in exactly
// the blocks the kernel asks for.
//
// Verification: the digest covers the whole blob, so a chunk cannot be checked on its
// own without a chunk digest list. What is verified:
//   - the size against the manifest's (when given) and the EROFS superblock at mount;
//   - the whole blob against its digest whenever all chunks have been fetched (always
//     for a full fetch; lazily when a layer's cache becomes complete); a mismatch marks
//     the layer corrupt: its cache is dropped, reads fail with EIO, acquires fail;
//   - after a successful full verification a chunk-hash table is written next to the
//     cache (CACHE/<hex>.chunks) and every later re-fetch of an evicted chunk is
//     checked against it (trust on first full verification).

var _ fuseFS = (*Daemon)(nil)

func (d *Daemon) lookup(name string) (fileAttr, bool) {
	d.mu.Lock()
	l := d.layers[name]
	d.mu.Unlock()
	if l == nil {
		return fileAttr{}, false
	}
	return l.attr(), true
}

func (d *Daemon) getattr(node uint64) (fileAttr, bool) {
	if node == fuseRootID {
		return fileAttr{ino: fuseRootID, mode: syscall.S_IFDIR | 0o755, nlink: 2}, true
	}
	l := d.layerByNode(node)
	if l == nil {
		return fileAttr{}, false
	}
	return l.attr(), true
}

func (d *Daemon) names() []dirName {
	var out []dirName
	for _, l := range d.snapshot() {
		out = append(out, dirName{name: l.hex, node: l.node})
	}
	return out
}

func (d *Daemon) read(node uint64, dest []byte, off int64) (int, syscall.Errno) {
	l := d.layerByNode(node)
	if l == nil {
		return 0, syscall.ESTALE
	}
	n, err := l.readAt(context.Background(), dest, off)
	if err != nil && !errors.Is(err, io.EOF) {
		l.d.log.Warn("read failed", "digest", l.digest, "offset", off, "err", err)
		return 0, syscall.EIO
	}
	return n, 0
}

func (d *Daemon) layerByNode(node uint64) *layerState {
	v, ok := d.nodes.Load(node)
	if !ok {
		return nil
	}
	return v.(*layerState)
}

func (l *layerState) attr() fileAttr {
	return fileAttr{ino: l.node, size: uint64(l.size), mode: syscall.S_IFREG | 0o444, nlink: 1}
}

// layerState is one layer blob known to layerd: its FUSE file, its fetch and cache
// counters, its verification state and (once mounted) its erofs mount.
type layerState struct {
	d      *Daemon
	digest string
	hex    string
	size   int64
	chunk  int64
	nchunk int64
	store  blob.Store
	spec   string

	node    uint64 // FUSE node ID of the blob file
	index   string // digest of the chunk index, if any (its hashes: indexPath)
	mnt     string
	mounted bool
	loop    loopInfo
	refs    map[string]bool
	idle    time.Time // when refs dropped to zero

	fetchedBytes atomic.Int64
	fetches      atomic.Int64
	hits         atomic.Int64
	misses       atomic.Int64
	prefetched   atomic.Int64 // chunks fetched by a prefetch list
	// meta is how many metadata chunks the chunk index names; metaPrefetched
	// how many of them the mount's prefetch fetched.
	meta           int64
	metaPrefetched atomic.Int64

	// stopPrefetch ends a running prefetch (the layer is being unmounted).
	stopPrefetch context.CancelFunc

	mu       sync.Mutex
	inflight map[int64]*fetchCall
	present  map[int64]bool // chunks fetched since this layerd started (for completeness)
	table    [][32]byte     // chunk hashes after a full verification, else nil
	verified bool
	corrupt  error
	storeErr string // the last fetch's failure ("" once one succeeds)
	verifyOn bool   // a verification is running
	touched  map[int64]bool
	access   []int64 // chunks in first-read order (AccessList)
}

type fetchCall struct {
	done chan struct{}
	data []byte
	err  error
}

func (l *layerState) key(idx int64) chunkKey { return chunkKey{l.hex, idx} }

func (l *layerState) tablePath() string { return filepath.Join(l.d.cache.dir, l.hex+".chunks") }

// indexPath keeps the chunk index's hashes for a layerd that takes over.
func (l *layerState) indexPath() string { return filepath.Join(l.d.cache.dir, l.hex+".index") }

func (l *layerState) loadTable() {
	if t := readHashes(l.tablePath(), l.nchunk); t != nil {
		l.table, l.verified = t, true
	}
}

// readHashes reads n chunk hashes written by writeHashes (nil if absent or of
// another length).
func readHashes(path string, n int64) [][32]byte {
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) != n*32 {
		return nil
	}
	t := make([][32]byte, n)
	for i := range t {
		copy(t[i][:], b[i*32:])
	}
	return t
}

func writeHashes(path string, t [][32]byte) {
	var tb bytes.Buffer
	for _, h := range t {
		tb.Write(h[:])
	}
	_ = os.WriteFile(path, tb.Bytes(), 0o600)
}

func (l *layerState) chunkLen(idx int64) int64 {
	return min(l.chunk, l.size-idx*l.chunk)
}

// readAt serves a read of the blob file.
func (l *layerState) readAt(ctx context.Context, p []byte, off int64) (int, error) {
	if off >= l.size {
		return 0, io.EOF
	}
	if int64(len(p)) > l.size-off {
		p = p[:l.size-off]
	}
	done := 0
	for done < len(p) {
		pos := off + int64(done)
		idx := pos / l.chunk
		in := pos - idx*l.chunk
		want := min(int64(len(p)-done), l.chunkLen(idx)-in)
		l.touch(idx)
		if n, ok := l.d.cache.ReadAt(l.key(idx), p[done:done+int(want)], in); ok && int64(n) == want {
			l.hits.Add(1)
			done += n
			continue
		}
		l.misses.Add(1)
		data, err := l.fetchWait(ctx, idx)
		if err != nil {
			return done, err
		}
		done += copy(p[done:done+int(want)], data[in:])
	}
	return done, nil
}

// fetchWait is fetch for a reader: while the blob store fails with what may pass
// (unreachable, timeouts, 5xx), it retries with backoff for up to StoreWait, so
// that a store that goes away and comes back costs readers a pause.
func (l *layerState) fetchWait(ctx context.Context, idx int64) ([]byte, error) {
	wait := l.d.cfg.StoreWait
	deadline := time.Now().Add(wait)
	backoff := 20 * time.Millisecond
	for attempt := 0; ; attempt++ {
		data, err := l.fetch(ctx, idx)
		l.mu.Lock()
		if err != nil {
			l.storeErr = err.Error()
		} else {
			l.storeErr = ""
		}
		l.mu.Unlock()
		if err == nil || wait < 0 || !retryable(err) || time.Now().After(deadline) {
			if err != nil && attempt > 0 {
				err = errdefs.Wrap(api.CodeUnavailable, err, "blob store %s failing for %v", l.spec, wait)
			}
			if err == nil && attempt > 0 {
				l.d.log.Info("blob store is back", "digest", l.digest, "chunk", idx, "attempts", attempt+1)
			}
			return data, err
		}
		if attempt == 0 {
			l.d.log.Warn("blob store failing: reads wait for it", "digest", l.digest, "chunk", idx, "wait", wait, "err", err)
		}
		if sleep(ctx, min(backoff, time.Until(deadline))) != nil {
			return nil, err
		}
		backoff = min(2*backoff, time.Second)
	}
}

// retryable reports whether a failed fetch may succeed later: not a corrupt,
// missing or malformed blob, and not a cancelled read.
func retryable(err error) bool {
	if errors.Is(err, blob.ErrDigestMismatch) || errors.Is(err, context.Canceled) {
		return false
	}
	switch errdefs.CodeOf(err) {
	case api.CodeNotFound, api.CodeInvalidArgument, api.CodeBadGateway:
		return false
	}
	return true
}

// fetch gets one chunk from the store (single flight), checks it against the chunk
// table if there is one, and stores it in the cache.
func (l *layerState) fetch(ctx context.Context, idx int64) ([]byte, error) {
	l.mu.Lock()
	if l.corrupt != nil {
		l.mu.Unlock()
		return nil, l.corrupt
	}
	if c := l.inflight[idx]; c != nil {
		l.mu.Unlock()
		<-c.done
		return c.data, c.err
	}
	c := &fetchCall{done: make(chan struct{})}
	l.inflight[idx] = c
	table := l.table
	l.mu.Unlock()

	c.data, c.err = l.fetchChunk(ctx, idx, table)
	l.mu.Lock()
	delete(l.inflight, idx)
	complete := false
	if c.err == nil {
		l.present[idx] = true
		complete = !l.verified && !l.verifyOn && int64(len(l.present)) == l.nchunk
		if complete {
			l.verifyOn = true
		}
	}
	l.mu.Unlock()
	close(c.done)
	if complete {
		go func() { _ = l.verify(context.Background()) }()
	}
	return c.data, c.err
}

func (l *layerState) fetchChunk(ctx context.Context, idx int64, table [][32]byte) ([]byte, error) {
	n := l.chunkLen(idx)
	buf := make([]byte, n)
	got, err := l.store.ReadAt(ctx, l.digest, buf, idx*l.chunk)
	l.fetches.Add(1)
	l.fetchedBytes.Add(int64(got))
	if err != nil && !(errors.Is(err, io.EOF) && int64(got) == n) {
		return nil, fmt.Errorf("fetch chunk %d of %s: %w", idx, l.digest, err)
	}
	if int64(got) != n {
		return nil, l.markCorrupt(fmt.Errorf("blob %s is truncated (chunk %d short)", l.digest, idx))
	}
	if table != nil && sha256.Sum256(buf) != table[idx] {
		return nil, l.markCorrupt(fmt.Errorf("blob %s chunk %d does not match the chunk table", l.digest, idx))
	}
	if err := l.d.cache.Put(l.key(idx), buf); err != nil {
		l.d.log.Warn("cache put", "digest", l.digest, "err", err)
	}
	return buf, nil
}

func (l *layerState) markCorrupt(err error) error {
	err = errdefs.Wrap(api.CodeBadGateway, blob.ErrDigestMismatch, "layer %s is corrupt in its blob store: %v", l.digest, err)
	l.mu.Lock()
	if l.corrupt == nil {
		l.corrupt = err
	}
	l.mu.Unlock()
	l.d.cache.DropBlob(l.hex)
	_ = os.Remove(l.tablePath())
	return err
}

// fetchAll fetches every chunk (a full fetch before mount), several at a time, and
// verifies the digest.
func (l *layerState) fetchAll(ctx context.Context) error {
	all := make([]int64, 0, l.nchunk)
	for idx := int64(0); idx < l.nchunk; idx++ {
		if l.d.cache.Has(l.key(idx)) {
			l.mu.Lock()
			l.present[idx] = true
			l.mu.Unlock()
			continue
		}
		all = append(all, idx)
	}
	if err := l.fetchMany(ctx, all, nil); err != nil {
		return err
	}
	return l.verify(ctx)
}

// verify hashes the whole blob from the cache (fetching what is missing), compares
// it with the digest and writes the chunk table; a mismatch marks the layer corrupt.
func (l *layerState) verify(ctx context.Context) error {
	defer func() {
		l.mu.Lock()
		l.verifyOn = false
		l.mu.Unlock()
	}()
	l.mu.Lock()
	if l.verified {
		l.mu.Unlock()
		return nil
	}
	l.mu.Unlock()
	h := sha256.New()
	table := make([][32]byte, l.nchunk)
	buf := make([]byte, l.chunk)
	for idx := int64(0); idx < l.nchunk; idx++ {
		b := buf[:l.chunkLen(idx)]
		n, ok := l.d.cache.ReadAt(l.key(idx), b, 0)
		if !ok || n != len(b) {
			data, err := l.fetch(ctx, idx)
			if err != nil {
				return err
			}
			b = data
		}
		h.Write(b)
		table[idx] = sha256.Sum256(b)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != l.digest {
		return l.markCorrupt(fmt.Errorf("digest mismatch: content hashes to %s", got))
	}
	writeHashes(l.tablePath(), table)
	l.mu.Lock()
	l.table, l.verified = table, true
	l.mu.Unlock()
	return nil
}

// LayerStats is the accounting of one layer on a node.
type LayerStats struct {
	Digest       string `json:"digest"`
	BlobSize     int64  `json:"blob_size"`
	FetchedBytes int64  `json:"fetched_bytes"`
	Fetches      int64  `json:"fetches"`
	CacheHits    int64  `json:"cache_hits"`
	CacheMisses  int64  `json:"cache_misses"`
	// Prefetched is how many chunks a prefetch list fetched ahead of readers.
	Prefetched int64 `json:"prefetched_chunks"`
	// MetaChunks is how many chunks hold EROFS metadata (the chunk index's
	// Meta); MetaPrefetched how many of them the mount fetched ahead of readers.
	MetaChunks     int64    `json:"meta_chunks,omitempty"`
	MetaPrefetched int64    `json:"meta_prefetched_chunks,omitempty"`
	ChunkSize      int64    `json:"chunk_size"`
	Mounted        bool     `json:"mounted"`
	Mountpoint     string   `json:"mountpoint,omitempty"`
	Refs           int      `json:"refs"`
	Holders        []string `json:"holders,omitempty"`
	Verified       bool     `json:"verified"`
	Corrupt        string   `json:"corrupt,omitempty"`
	// StoreError is the last failure to fetch a chunk, until a fetch succeeds.
	StoreError string `json:"store_error,omitempty"`
	// The loop device under the erofs mount.
	LoopDevice   string `json:"loop_device,omitempty"`
	LoopDirectIO bool   `json:"loop_direct_io"`
	ReadAheadKB  int    `json:"read_ahead_kb,omitempty"`
}

func (l *layerState) stats() LayerStats {
	s := LayerStats{
		Digest: l.digest, BlobSize: l.size, FetchedBytes: l.fetchedBytes.Load(), Fetches: l.fetches.Load(),
		CacheHits: l.hits.Load(), CacheMisses: l.misses.Load(), ChunkSize: l.chunk, Prefetched: l.prefetched.Load(),
		MetaChunks: l.meta, MetaPrefetched: l.metaPrefetched.Load(),
		Mounted: l.mounted, Mountpoint: l.mnt, Refs: len(l.refs),
	}
	if l.mounted {
		s.LoopDevice, s.LoopDirectIO, s.ReadAheadKB = l.loop.dev, l.loop.directIO, l.loop.readAheadKB
	}
	for h := range l.refs {
		s.Holders = append(s.Holders, h)
	}
	l.mu.Lock()
	s.Verified = l.verified
	if l.corrupt != nil {
		s.Corrupt = l.corrupt.Error()
	}
	s.StoreError = l.storeErr
	l.mu.Unlock()
	return s
}
