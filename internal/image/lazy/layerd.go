// Package lazy loads EROFS layers on demand on a node. A small long-lived process,
// layerd (`dsec layerd`, started by the agent with Setsid and found again through a
// unix socket and a pid file), owns everything that must outlive the agent:
//
//   - one FUSE mount (LAYERS/fuse) on which every needed layer blob is a read-only
//     regular file whose reads fetch only the chunks the kernel asks for, through
//     blob.Store.ReadAt, into a bounded on-disk chunk cache (LAYERS/cache, LRU);
//   - one file-backed erofs mount per layer (LAYERS/<hex>/mnt, `mount -t erofs
//     FUSEFILE DIR`), shared by every sandbox using the layer as an overlay lower;
//   - per-layer holders (sandbox IDs): acquire on create, release on delete, sync
//     after an agent restart; layers without holders are unmounted after a grace
//     period.
//
// A layer built with a chunk index (blob.ChunkIndex, index.go) is read at the
// index's chunk size and every fetched chunk is checked against it; without one,
// the blob is verified once all of it has been read. A layer with a prefetch list
// (AccessList, prefetch.go) has those chunks fetched in the background when it is
// first mounted. The loop device path (loop.go) is the fallback where the kernel
// refuses a file-backed mount.
//
// Killing or restarting the agent does not touch any of it: running sandboxes keep
// reading through layerd, and the restarted agent talks to the same layerd again.
// Killing layerd costs readers a pause, not an error: a holder process (holder.go)
// keeps a copy of the /dev/fuse descriptor and starts layerd again, which receives
// it, reloads its saved state (state.go: layers, FUSE node IDs, holders) and has the
// kernel resend what its predecessor read but never answered. For that, layerd
// speaks the FUSE protocol itself (fuseproto.go, fuseserver.go): a FUSE library
// that answers INIT itself and keeps node IDs in memory cannot resume a connection.
package lazy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Defaults.
const (
	// DefaultChunkSize is the unit fetched from a blob store. `dsec bench image
	// --chunk-sweep 32k,64k,128k,256k` (Python + git in a fresh sandbox on the
	// Debian base layer, loop direct I/O, 32 KiB readahead) fetched 4.2%, 5.0%,
	// 6.4% and 8.1% of the layer: 64 KiB keeps it near 5% with half the fetches of
	// 32 KiB, which was slower to first output at 100 MB/s (see README). A layer
	// with a chunk index is read at its index's chunk size, which `dsec image
	// build` sets to this same value (blob.DefaultIndexChunk).
	DefaultChunkSize  = blob.DefaultIndexChunk
	DefaultCacheBytes = 8 << 30
	DefaultGrace      = 30 * time.Second
	// DefaultStoreWait is how long a read of an uncached chunk keeps retrying a
	// blob store that fails (unreachable, 5xx) before it fails with EIO.
	DefaultStoreWait = 2 * time.Minute
	// DefaultReadAheadKB is the loop device's readahead: the kernel's 128 KiB
	// fetched 5.5% of the Debian base for the bench task at 64 KiB chunks, 32 KiB
	// 5.0%, 16 KiB 4.8% (more FUSE requests for sequential reads).
	DefaultReadAheadKB = 32
)

// Config configures layerd (and the client that starts it).
type Config struct {
	// Root is the layers directory (DATA_DIR/layers).
	Root       string        `json:"root"`
	ChunkSize  int64         `json:"chunk_size,omitempty"`
	CacheBytes int64         `json:"cache_bytes,omitempty"`
	Grace      time.Duration `json:"grace,omitempty"`
	// ReadAheadKB is the readahead of each layer's loop device, which erofs uses for
	// metadata and file data alike (0: DefaultReadAheadKB; negative: the kernel's).
	ReadAheadKB int `json:"read_ahead_kb,omitempty"`
	// BufferedLoop has the loop device read the FUSE blob file through the page
	// cache instead of with direct I/O (a second cached copy, FUSE readahead).
	BufferedLoop bool `json:"buffered_loop,omitempty"`
	// LoopDevice mounts each layer through a loop device on the FUSE blob file
	// instead of directly on the file (file-backed erofs, the default, which
	// falls back to a loop device where the kernel refuses it with ENOTBLK).
	LoopDevice bool `json:"loop_device,omitempty"`
	// StoreWait is how long a read of an uncached chunk waits for a failing blob
	// store (retrying with backoff) before the reader gets EIO (0:
	// DefaultStoreWait; negative: fail at once). Waiting suits sandboxes (a
	// program does not expect EIO from its root file system); failing at once
	// suits callers that retry themselves. Corrupt or missing blobs fail at once.
	StoreWait time.Duration `json:"store_wait,omitempty"`
	// MetaPrefetch fetches a layer's metadata chunks (the chunk index's Meta:
	// superblock, inodes, directory blocks, small files) in the background
	// when the layer is mounted, before its prefetch list if it has one.
	MetaPrefetch bool `json:"meta_prefetch,omitempty"`
}

func (c *Config) defaults() {
	if c.ChunkSize <= 0 {
		c.ChunkSize = DefaultChunkSize
	}
	if c.CacheBytes <= 0 {
		c.CacheBytes = DefaultCacheBytes
	}
	if c.Grace <= 0 {
		c.Grace = DefaultGrace
	}
	if c.ReadAheadKB == 0 {
		c.ReadAheadKB = DefaultReadAheadKB
	}
	if c.StoreWait == 0 {
		c.StoreWait = DefaultStoreWait
	}
}

// SocketPath is layerd's control socket for a layers root (short: unix socket
// paths are limited to 107 bytes).
func SocketPath(root string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(root)))
	return filepath.Join("/run/dsec", "layerd-"+hex.EncodeToString(sum[:6])+".sock")
}

// PidPath is layerd's pid file.
func PidPath(root string) string { return filepath.Join(root, "layerd.pid") }

// FuseDir is where layerd's FUSE file system is mounted.
func FuseDir(root string) string { return filepath.Join(root, "fuse") }

// Daemon is layerd.
type Daemon struct {
	cfg   Config
	cache *Cache
	srv   *fuseServer
	fuse  int // the /dev/fuse descriptor
	log   *slog.Logger
	// resumed is set when this layerd took over a predecessor's connection.
	resumed bool

	opMu   sync.Mutex // serializes acquire/release/unmount and state saves (never taken on the read path)
	mu     sync.Mutex // guards layers, stores and nextNode
	layers map[string]*layerState
	stores map[string]blob.Store
	// nodes maps FUSE node IDs to layers (the read path's lookup).
	nodes    sync.Map
	nextNode uint64
	// openStore opens a blob store spec (OpenStore; tests substitute it).
	openStore func(spec string) (blob.Store, error)

	holderMu sync.Mutex
	holder   *holderLink
	closing  bool

	// journal records holder changes between saves of the state (state.go).
	journal  *os.File
	journalN int
}

// Cleanup detaches every mount layerd may have left under root (a layerd killed
// with SIGKILL leaves a dead FUSE mount and erofs mounts on it).
func Cleanup(root string) {
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		if len(e.Name()) == 64 {
			_ = unix.Unmount(filepath.Join(root, e.Name(), "mnt"), unix.MNT_DETACH)
		}
	}
	_ = unix.Unmount(FuseDir(root), unix.MNT_DETACH)
}

// NewDaemon cleans up leftovers, mounts the FUSE file system and opens the cache
// (a fresh layerd without a holder: tests; Run adds the holder and takeover).
func NewDaemon(cfg Config, logger *slog.Logger) (*Daemon, error) {
	return openDaemon(cfg, logger, -1)
}

// openDaemon takes over the FUSE connection fuseFD (from the holder) if it is
// given and layerd's saved state describes it; otherwise it cleans up and mounts
// afresh. d.resumed tells which.
func openDaemon(cfg Config, logger *slog.Logger, fuseFD int) (*Daemon, error) {
	cfg.defaults()
	if logger == nil {
		logger = newLogger()
	}
	if err := os.MkdirAll(cfg.Root, 0o700); err != nil {
		return nil, err
	}
	cache, err := NewCache(filepath.Join(cfg.Root, "cache"), cfg.CacheBytes)
	if err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, cache: cache, log: logger, layers: map[string]*layerState{}, stores: map[string]blob.Store{}, nextNode: fuseRootID + 1}
	if fuseFD >= 0 {
		err := d.takeOver(fuseFD)
		if err == nil {
			return d, nil
		}
		logger.Error("cannot take over the held fuse connection: mounting afresh (running sandboxes lose their layers)", "err", err)
		unix.Close(fuseFD)
		d = &Daemon{cfg: cfg, cache: cache, log: logger, layers: map[string]*layerState{}, stores: map[string]blob.Store{}, nextNode: fuseRootID + 1}
	}
	Cleanup(cfg.Root)
	if err := os.MkdirAll(FuseDir(cfg.Root), 0o700); err != nil {
		return nil, err
	}
	fd, err := mountFuse(FuseDir(cfg.Root))
	if err != nil {
		return nil, fmt.Errorf("layerd: %w", err)
	}
	srv := newFuseServer(fd, d, logger)
	resend, err := srv.handshake(fuseReadAhead(cfg.ReadAheadKB))
	if err != nil {
		unix.Close(fd)
		_ = unix.Unmount(FuseDir(cfg.Root), unix.MNT_DETACH)
		return nil, fmt.Errorf("layerd: %w", err)
	}
	if !resend {
		logger.Warn("the kernel does not announce FUSE_NOTIFY_RESEND (Linux 6.9+): reads in flight when layerd dies will hang")
	}
	d.srv, d.fuse = srv, fd
	d.saveStateLocked()
	d.openJournal()
	srv.serve()
	return d, nil
}

// fuseReadAhead is the FUSE mount's readahead: that of the loop devices (it applies
// to buffered loop devices and file-backed mounts; direct I/O bypasses it).
func fuseReadAhead(kb int) int {
	if kb <= 0 {
		return 128 << 10
	}
	return max(kb, 4) << 10
}

// AcquireRequest asks for layers on behalf of a holder (a sandbox ID).
// Each layer is an images.Layer: layerd reads its Digest, Store (blob store
// spec, OpenStore), Size (expected, if known), Index (the digest of its chunk
// index, blob.ChunkIndex: chunks are then read at the index's chunk size and
// each is verified as it is fetched; without one, chunks are verified only once
// the whole blob has been read) and PrefetchList (the digest of an AccessList
// blob: when this node mounts the layer, it fetches those chunks in the
// background).
type AcquireRequest struct {
	Holder string        `json:"holder"`
	Layers []image.Layer `json:"layers"`
	// Prefetch "full" fetches and verifies each whole blob before mounting it.
	Prefetch string `json:"prefetch,omitempty"`
}

// AcquireResponse returns the erofs mount directories, in request order.
type AcquireResponse struct {
	Mounts []string `json:"mounts"`
}

// Acquire mounts (or re-uses) every layer and adds the holder to each. On failure
// nothing is left held or mounted by this call.
func (d *Daemon) Acquire(ctx context.Context, req AcquireRequest) (AcquireResponse, error) {
	if req.Holder == "" {
		return AcquireResponse{}, errdefs.Invalid("acquire: empty holder")
	}
	d.opMu.Lock()
	defer d.opMu.Unlock()
	var resp AcquireResponse
	type undo struct {
		l     *layerState
		fresh bool // mounted by this call
		had   bool // holder held it before
	}
	var done []undo
	fail := func(err error) (AcquireResponse, error) {
		for _, u := range done {
			if !u.had {
				delete(u.l.refs, req.Holder)
			}
			if u.fresh && len(u.l.refs) == 0 {
				d.unmountLocked(u.l)
			}
		}
		return AcquireResponse{}, err
	}
	for _, ref := range req.Layers {
		l, fresh, err := d.ensureMounted(ctx, ref, req.Prefetch)
		if err != nil {
			return fail(err)
		}
		done = append(done, undo{l, fresh, l.refs[req.Holder]})
		l.refs[req.Holder] = true
		resp.Mounts = append(resp.Mounts, l.mnt)
	}
	var added []holderChange
	for _, u := range done {
		if !u.had {
			added = append(added, holderChange{Op: "+", Layer: u.l.hex, Holder: req.Holder})
		}
	}
	d.journalLocked(added)
	return resp, nil
}

func (d *Daemon) store(spec string) (blob.Store, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.stores[spec]; s != nil {
		return s, nil
	}
	open := d.openStore
	if open == nil {
		open = OpenStore
	}
	s, err := open(spec)
	if err != nil {
		return nil, err
	}
	d.stores[spec] = s
	return s, nil
}

// ensureMounted returns the mounted layer, mounting it if needed. Caller holds opMu.
func (d *Daemon) ensureMounted(ctx context.Context, ref image.Layer, prefetch string) (*layerState, bool, error) {
	h, err := blob.ParseDigest(ref.Digest)
	if err != nil {
		return nil, false, err
	}
	d.mu.Lock()
	l := d.layers[h]
	d.mu.Unlock()
	if l != nil && l.mounted {
		l.mu.Lock()
		cerr := l.corrupt
		l.mu.Unlock()
		if cerr != nil {
			return nil, false, cerr
		}
		if ref.Size > 0 && ref.Size != l.size {
			return nil, false, errdefs.Wrap(api.CodeBadGateway, blob.ErrDigestMismatch, "layer %s is %d bytes, the manifest says %d", ref.Digest, l.size, ref.Size)
		}
		return l, false, nil
	}
	st, err := d.store(ref.Store)
	if err != nil {
		return nil, false, err
	}
	size, err := st.Stat(ctx, ref.Digest)
	if err != nil {
		if errdefs.CodeOf(err) == api.CodeNotFound {
			return nil, false, errdefs.NotFound("layer %s not found in blob store %s", ref.Digest, ref.Store)
		}
		return nil, false, errdefs.Wrap(api.CodeUnavailable, err, "blob store %s: stat layer %s", ref.Store, ref.Digest)
	}
	if ref.Size > 0 && size != ref.Size {
		return nil, false, errdefs.Wrap(api.CodeBadGateway, blob.ErrDigestMismatch, "layer %s is %d bytes in its blob store, the manifest says %d (truncated or corrupt)", ref.Digest, size, ref.Size)
	}
	chunk := d.cfg.ChunkSize
	var ix blob.ChunkIndex
	var ixBytes int64
	if ref.Index != "" {
		if ix, ixBytes, err = loadIndex(ctx, st, ref, size); err != nil {
			return nil, false, err
		}
		chunk = ix.ChunkSize
	}
	l = &layerState{
		d: d, digest: ref.Digest, hex: h, size: size, chunk: chunk, store: st, spec: ref.Store,
		refs: map[string]bool{}, inflight: map[int64]*fetchCall{}, present: map[int64]bool{}, touched: map[int64]bool{},
		mnt: filepath.Join(d.cfg.Root, h, "mnt"),
	}
	l.fetchedBytes.Add(ixBytes) // the index is part of what reading the layer costs
	l.nchunk = (size + l.chunk - 1) / l.chunk
	l.checkChunkSize()
	l.loadTable()
	if l.table == nil && ix.Hashes != nil {
		l.table = ix.Hashes
	}
	l.meta = int64(len(ix.Meta))
	var meta []int64 // the metadata chunks, fetched first
	if d.cfg.MetaPrefetch {
		meta = ix.Meta
	}
	if (ref.PrefetchList != "" || len(meta) > 0) && prefetch != "full" {
		if ref.PrefetchList != "" {
			if _, err := blob.ParseDigest(ref.PrefetchList); err != nil {
				return nil, false, err
			}
		}
		// From now on, in the background: the mount itself reads through the cache
		// the prefetch warms.
		pctx, cancel := context.WithCancel(context.Background())
		l.stopPrefetch = cancel
		go l.prefetch(pctx, meta, ref.PrefetchList)
	}
	if ix.Hashes != nil {
		l.index = ref.Index
		writeHashes(l.indexPath(), ix.Hashes)
	}
	d.addLayer(l)
	cleanup := func() {
		if l.stopPrefetch != nil {
			l.stopPrefetch()
		}
		d.removeLayer(l)
		_ = os.RemoveAll(filepath.Join(d.cfg.Root, h))
		d.saveStateLocked()
	}
	if prefetch == "full" {
		if err := l.fetchAll(ctx); err != nil {
			cleanup()
			return nil, false, err
		}
	}
	if err := os.MkdirAll(l.mnt, 0o755); err != nil {
		cleanup()
		return nil, false, errdefs.Internal(err, "layer mountpoint")
	}
	// Saved before mounting: a layerd killed during the mount finds it again.
	d.saveStateLocked()
	src := filepath.Join(FuseDir(d.cfg.Root), h)
	li, err := mountErofs(src, l.mnt, !d.cfg.LoopDevice, d.cfg.BufferedLoop, d.cfg.ReadAheadKB)
	if err != nil {
		l.mu.Lock()
		cerr := l.corrupt
		l.mu.Unlock()
		cleanup()
		if cerr != nil {
			return nil, false, cerr
		}
		if strings.Contains(err.Error(), "input/output error") {
			return nil, false, errdefs.Wrap(api.CodeUnavailable, err, "layer %s: blob store %s failed while mounting", ref.Digest, ref.Store)
		}
		return nil, false, errdefs.Wrap(api.CodeBadGateway, err, "layer %s is not a valid EROFS image (corrupt blob?)", ref.Digest)
	}
	l.mounted, l.loop = true, li
	d.saveStateLocked()
	d.log.Info("mounted layer", "digest", ref.Digest, "bytes", size, "mnt", l.mnt, "dev", li.dev,
		"direct_io", li.directIO, "readahead_kib", li.readAheadKB)
	return l, true, nil
}

// unmountLocked unmounts a layer without holders. Caller holds opMu.
func (d *Daemon) unmountLocked(l *layerState) {
	if l.stopPrefetch != nil {
		l.stopPrefetch()
	}
	if l.mounted {
		if err := unix.Unmount(l.mnt, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			d.log.Warn("unmount failed; detaching", "mnt", l.mnt, "err", err)
			_ = unix.Unmount(l.mnt, unix.MNT_DETACH)
		}
		l.mounted = false
	}
	d.removeLayer(l)
	_ = os.RemoveAll(filepath.Join(d.cfg.Root, l.hex))
	d.saveStateLocked()
	d.log.Info("unmounted layer", "digest", l.digest)
}

// addLayer makes l visible on the FUSE mount under a node ID never used before
// on this connection.
func (d *Daemon) addLayer(l *layerState) {
	d.mu.Lock()
	if l.node == 0 {
		l.node = d.nextNode
		d.nextNode++
	}
	d.layers[l.hex] = l
	d.mu.Unlock()
	d.nodes.Store(l.node, l)
}

// removeLayer takes l off the FUSE mount.
func (d *Daemon) removeLayer(l *layerState) {
	d.mu.Lock()
	delete(d.layers, l.hex)
	d.mu.Unlock()
	d.nodes.Delete(l.node)
	if d.srv != nil {
		if err := d.srv.invalEntry(l.hex); err != nil {
			d.log.Warn("invalidate entry", "digest", l.digest, "err", err)
		}
	}
}

// Release drops a holder from every layer it holds.
func (d *Daemon) Release(holder string) {
	d.opMu.Lock()
	defer d.opMu.Unlock()
	d.releaseLocked(func(h string) bool { return h == holder })
}

// Sync drops every holder not in keep (after an agent restart: sandboxes that
// vanished while it was down, creates interrupted between acquire and record).
func (d *Daemon) Sync(keep []string) {
	set := map[string]bool{}
	for _, h := range keep {
		set[h] = true
	}
	d.opMu.Lock()
	defer d.opMu.Unlock()
	d.releaseLocked(func(h string) bool { return !set[h] })
}

func (d *Daemon) releaseLocked(drop func(string) bool) {
	now := time.Now()
	var removed []holderChange
	for _, l := range d.snapshot() {
		had := len(l.refs)
		for h := range l.refs {
			if drop(h) {
				delete(l.refs, h)
				removed = append(removed, holderChange{Op: "-", Layer: l.hex, Holder: h})
			}
		}
		if had > 0 && len(l.refs) == 0 {
			l.idle = now
		}
	}
	d.journalLocked(removed)
}

func (d *Daemon) snapshot() []*layerState {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*layerState, 0, len(d.layers))
	for _, l := range d.layers {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].digest < out[j].digest })
	return out
}

// reap unmounts layers idle for longer than the grace period.
func (d *Daemon) reap() {
	d.opMu.Lock()
	defer d.opMu.Unlock()
	for _, l := range d.snapshot() {
		if len(l.refs) == 0 && l.mounted && !l.idle.IsZero() && time.Since(l.idle) >= d.cfg.Grace {
			// Busy without a holder (a sandbox whose holder was lost): never pull a
			// layer from under a reader; try again after another grace period.
			if err := unix.Unmount(l.mnt, 0); err != nil {
				d.log.Warn("idle layer still in use: kept mounted", "digest", l.digest, "err", err)
				l.idle = time.Now()
				continue
			}
			d.unmountLocked(l)
		}
	}
}

// Stats is layerd's accounting.
type Stats struct {
	Pid    int          `json:"pid"`
	Layers []LayerStats `json:"layers"`
	Cache  CacheStats   `json:"cache"`
}

// Stats returns the accounting of every known layer.
func (d *Daemon) Stats() Stats {
	d.opMu.Lock()
	defer d.opMu.Unlock()
	s := Stats{Pid: os.Getpid(), Cache: d.cache.Stats(), Layers: []LayerStats{}}
	for _, l := range d.snapshot() {
		s.Layers = append(s.Layers, l.stats())
	}
	return s
}

// Close unmounts every layer and the FUSE file system, and lets the holder go.
func (d *Daemon) Close() {
	d.holderMu.Lock()
	d.closing = true
	d.holderMu.Unlock()
	d.opMu.Lock()
	for _, l := range d.snapshot() {
		d.unmountLocked(l)
	}
	_ = os.Remove(statePath(d.cfg.Root))
	if d.journal != nil {
		d.journal.Close()
		d.journal = nil
	}
	_ = os.Remove(journalPath(d.cfg.Root))
	d.opMu.Unlock()
	if err := unix.Unmount(FuseDir(d.cfg.Root), 0); err != nil {
		// Still in use (a detached layer a sandbox holds): the connection lives on
		// until the holder and this process let go of it, then it is aborted.
		d.log.Warn("unmount fuse; detaching", "err", err)
		_ = unix.Unmount(FuseDir(d.cfg.Root), unix.MNT_DETACH)
		d.srv.waitFor(2 * time.Second)
	} else {
		d.srv.wait()
	}
	unix.Close(d.fuse)
	d.holderMu.Lock()
	d.holder.bye()
	d.holder = nil
	d.holderMu.Unlock()
}

// Handler serves the control API on the unix socket.
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ping", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]int{"pid": os.Getpid()})
	})
	mux.HandleFunc("POST /acquire", func(w http.ResponseWriter, r *http.Request) {
		var req AcquireRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			writeErr(w, errdefs.Invalid("bad request: %v", err))
			return
		}
		resp, err := d.Acquire(r.Context(), req)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, 200, resp)
	})
	mux.HandleFunc("POST /release", func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Holder string }
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			writeErr(w, errdefs.Invalid("bad request: %v", err))
			return
		}
		d.Release(req.Holder)
		writeJSON(w, 200, struct{}{})
	})
	mux.HandleFunc("POST /sync", func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Keep []string }
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			writeErr(w, errdefs.Invalid("bad request: %v", err))
			return
		}
		d.Sync(req.Keep)
		writeJSON(w, 200, struct{}{})
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, d.Stats())
	})
	mux.HandleFunc("GET /access/{hex}", func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		l := d.layers[r.PathValue("hex")]
		d.mu.Unlock()
		if l == nil {
			writeErr(w, errdefs.NotFound("layer %s is not mounted on this node", r.PathValue("hex")))
			return
		}
		writeJSON(w, 200, l.accessList())
	})
	mux.HandleFunc("POST /exit", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, struct{}{})
		go func() { _ = syscall.Kill(os.Getpid(), syscall.SIGTERM) }()
	})
	return mux
}

type wireErr struct {
	Code    api.Code `json:"code"`
	Message string   `json:"message"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, err error) {
	writeJSON(w, 500, wireErr{Code: errdefs.CodeOf(err), Message: err.Error()})
}

// EnvMain is the environment variable that turns a process started by the client
// into layerd (its value is the JSON Config).
const EnvMain = "DSEC_LAYERD_CONFIG"

// MaybeMain runs layerd and exits if this process was started as layerd. The dsec
// binary calls it from its hidden `layerd` command; test binaries that start layerd call it
// from TestMain.
func MaybeMain() {
	if v := os.Getenv(EnvHolder); v != "" {
		var hc holderConfig
		if err := json.Unmarshal([]byte(v), &hc); err != nil {
			newLogger().Error("bad config", "env", EnvHolder, "err", err)
			os.Exit(2)
		}
		os.Exit(holderMain(hc))
	}
	v := os.Getenv(EnvMain)
	if v == "" {
		return
	}
	var cfg Config
	if err := json.Unmarshal([]byte(v), &cfg); err != nil {
		newLogger().Error("bad config", "env", EnvMain, "err", err)
		os.Exit(2)
	}
	os.Exit(Run(cfg))
}

// Run is layerd's main: one per layers root (an flock on ROOT/layerd.lock), serving
// until SIGTERM/SIGINT, then unmounting everything.
func Run(cfg Config) int {
	logger := newLogger()
	if err := os.MkdirAll(cfg.Root, 0o700); err != nil {
		logger.Error("create root", "root", cfg.Root, "err", err)
		return 1
	}
	lock, err := os.OpenFile(filepath.Join(cfg.Root, "layerd.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		logger.Error("open lock", "err", err)
		return 1
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		logger.Info("another layerd runs for this root", "root", cfg.Root)
		return 0
	}
	link, fuseFD, err := dialHolder(cfg.Root)
	if err != nil {
		logger.Warn("holder", "err", err)
	}
	d, err := openDaemon(cfg, logger, fuseFD)
	if err != nil {
		link.bye()
		logger.Error("start", "err", err)
		return 1
	}
	if !d.resumed {
		link.bye() // a holder of a connection this layerd did not take over
		link = nil
	}
	if exe, err := os.Executable(); err != nil {
		logger.Error("no holder: a crash of layerd will break running sandboxes' layers", "err", err)
	} else {
		d.keepHolder(link, holderConfig{Root: cfg.Root, Exe: exe, Layerd: os.Getenv(EnvMain)})
	}
	sock := SocketPath(cfg.Root)
	ln, err := listenUnix(sock)
	if err != nil {
		logger.Error("listen", "socket", sock, "err", err)
		d.Close()
		return 1
	}
	_ = os.WriteFile(PidPath(cfg.Root), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600)
	hs := &http.Server{Handler: d.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	tick := time.NewTicker(max(d.cfg.Grace/4, 50*time.Millisecond))
	logger.Info("serving", "root", cfg.Root, "socket", sock, "chunk_bytes", d.cfg.ChunkSize, "cache_bytes", d.cfg.CacheBytes,
		"resumed", d.resumed, "layers", len(d.snapshot()))
	for {
		select {
		case <-tick.C:
			d.reap()
			continue
		case <-stop:
		}
		break
	}
	_ = hs.Close()
	d.Close()
	_ = os.Remove(sock)
	_ = os.Remove(PidPath(cfg.Root))
	logger.Info("stopped")
	return 0
}

// newLogger is layerd's own logger: text lines on stderr (the client points it at
// ROOT/layerd.log).
func newLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "layerd")
}
