package lazy

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/layer"
	"github.com/dsec-dev/dsec/internal/testwait"
)

// chunkLog wraps a store and records the chunk of every range read.
type chunkLog struct {
	blob.Store
	chunk int64
	mu    sync.Mutex
	reads map[int64]int
}

func (c *chunkLog) ReadAt(ctx context.Context, d string, p []byte, off int64) (int, error) {
	n, err := c.Store.ReadAt(ctx, d, p, off)
	c.mu.Lock()
	c.reads[off/c.chunk]++
	c.mu.Unlock()
	return n, err
}

func (c *chunkLog) snapshot() map[int64]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[int64]int, len(c.reads))
	for k, v := range c.reads {
		out[k] = v
	}
	return out
}

// metaLayer builds (with layer.Build, which records the metadata chunks in the
// chunk index) a layer of 6 files of 1 MiB and 1500 small files in 60
// directories, and returns the store dir, the layer and its index.
func metaLayer(t *testing.T) (string, image.Layer, blob.ChunkIndex) {
	t.Helper()
	src := t.TempDir()
	for i := 0; i < 6; i++ {
		b := make([]byte, 1<<20)
		rand.Read(b)
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("big%d", i)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for d := 0; d < 60; d++ {
		dir := filepath.Join(src, "usr", fmt.Sprintf("lib%02d", d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for f := 0; f < 25; f++ {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("module_%03d.py", f)), []byte("x = 1\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	storeDir := t.TempDir()
	st, err := blob.NewDir(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	res, err := layer.Build(ctx, layer.Source{Kind: "dir", Arg: src}, st, layer.Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	b, err := blob.ReadSmall(ctx, st, res.Index, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := blob.ParseChunkIndex(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(ix.Meta) == 0 || int64(len(ix.Meta)) >= ix.Chunks()/2 {
		t.Fatalf("%d of %d chunks recorded as metadata", len(ix.Meta), ix.Chunks())
	}
	return storeDir, res.Layer, ix
}

// walk lists every directory and stats every name under mnt: metadata only.
func walk(t *testing.T, mnt string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(mnt, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if _, err := os.Lstat(p); err != nil {
			return err
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMetaPrefetch: a node mounting a layer never seen before fetches the
// metadata chunks its chunk index names, each once, in the background; then
// walking the whole tree fetches nothing more. Without MetaPrefetch the same walk
// fetches from the store.
func TestMetaPrefetch(t *testing.T) {
	needRoot(t)
	storeDir, ref, ix := metaLayer(t)
	ctx := context.Background()
	open := func(cfg Config) (*Daemon, *chunkLog, string) {
		d := newTestDaemon(t, cfg)
		st, _ := OpenStore("dir:" + storeDir)
		cl := &chunkLog{Store: st, chunk: ix.ChunkSize, reads: map[int64]int{}}
		d.stores["test"] = cl
		r := ref
		r.Store = "test"
		resp, err := d.Acquire(ctx, AcquireRequest{Holder: "a", Layers: []image.Layer{r}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Release("a") })
		return d, cl, resp.Mounts[0]
	}

	d, cl, mnt := open(Config{Grace: time.Hour, MetaPrefetch: true})
	allMeta := func() bool {
		for _, c := range ix.Meta {
			if !d.cache.Has(chunkKey{ref.Digest[7:], c}) {
				return false
			}
		}
		return true
	}
	if !testwait.Until(20*time.Second, allMeta) {
		t.Fatalf("metadata prefetch did not finish: %+v", d.Stats().Layers[0])
	}
	reads := cl.snapshot()
	var extra []int64
	twice := 0
	for c, n := range reads {
		if n > 1 {
			// A reader's miss can race the prefetch's fetch of the same chunk
			// once (the mount reads the superblock as the prefetch starts).
			twice++
			t.Logf("chunk %d read from the store %d times", c, n)
		}
		if n > 2 || twice > 1 {
			t.Errorf("chunk %d read from the store %d times (%d chunks more than once)", c, n, twice)
		}
		if _, meta := slices.BinarySearch(ix.Meta, c); !meta {
			extra = append(extra, c)
		}
	}
	s := d.Stats().Layers[0]
	// The mount itself reads the superblock (and the kernel's readahead around
	// it) as the prefetch starts: those chunks come from the mount, not the prefetch.
	if s.MetaChunks != int64(len(ix.Meta)) || s.MetaPrefetched == 0 || len(extra) > 2 {
		t.Fatalf("%d metadata chunks; prefetched %d of %d; chunks read that are not metadata: %v", s.MetaChunks, s.MetaPrefetched, len(ix.Meta), extra)
	}
	before := len(cl.snapshot())
	names := walk(t, mnt)
	if after := cl.snapshot(); len(after) != before || names < 1500 {
		t.Fatalf("walking %d names after the metadata prefetch read %d more chunks from the store", names, len(after)-before)
	}
	t.Logf("%d of %d chunks are metadata; mount + prefetch read %d chunks (%d not metadata); walk of %d names read none", len(ix.Meta), ix.Chunks(), before, len(extra), names)

	off, ocl, omnt := open(Config{Grace: time.Hour})
	before = len(ocl.snapshot())
	walk(t, omnt)
	if s := off.Stats().Layers[0]; s.MetaPrefetched != 0 || len(ocl.snapshot()) == before {
		t.Fatalf("without the metadata prefetch: prefetched %d, the walk read %d chunks", s.MetaPrefetched, len(ocl.snapshot())-before)
	}
}

// TestMetaPrefetchVerifies: a metadata chunk altered in the blob store fails the
// prefetch's verification as it fails a read's: the layer is marked corrupt and
// reads of it fail.
func TestMetaPrefetchVerifies(t *testing.T) {
	needRoot(t)
	storeDir, ref, ix := metaLayer(t)
	// A metadata chunk that the mount itself does not read (the superblock and
	// the root directory it does).
	plain := newTestDaemon(t, Config{Grace: time.Hour})
	st, _ := OpenStore("dir:" + storeDir)
	cl := &chunkLog{Store: st, chunk: ix.ChunkSize, reads: map[int64]int{}}
	plain.stores["test"] = cl
	pref := ref
	pref.Store = "test"
	if _, err := plain.Acquire(context.Background(), AcquireRequest{Holder: "p", Layers: []image.Layer{pref}}); err != nil {
		t.Fatal(err)
	}
	mountReads := cl.snapshot()
	plain.Release("p")
	bad := int64(-1)
	for _, c := range ix.Meta {
		if mountReads[c] == 0 {
			bad = c
		}
	}
	if bad < 0 {
		t.Fatalf("the mount read every metadata chunk (%v of %v)", mountReads, ix.Meta)
	}
	p := filepath.Join(storeDir, "sha256", ref.Digest[7:])
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	raw[bad*ix.ChunkSize] ^= 0xff
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	d := newTestDaemon(t, Config{Grace: time.Hour, MetaPrefetch: true})
	ref.Store = "dir:" + storeDir
	resp, err := d.Acquire(context.Background(), AcquireRequest{Holder: "a", Layers: []image.Layer{ref}})
	if err != nil {
		// The prefetch found the altered chunk before the mount finished:
		// the mount's own reads then fail on the corrupt layer.
		if !errors.Is(err, blob.ErrDigestMismatch) && !strings.Contains(err.Error(), "corrupt") {
			t.Fatalf("mount with chunk %d altered: %v, want the layer's corruption", bad, err)
		}
		t.Logf("the mount failed on the corrupt layer: %v", err)
		return
	}
	defer d.Release("a")
	corrupt := func() bool { return d.Stats().Layers[0].Corrupt != "" }
	if !testwait.Until(20*time.Second, corrupt) {
		t.Fatalf("prefetch of altered metadata chunk %d: layer not marked corrupt: %+v", bad, d.Stats().Layers[0])
	}
	if _, err := os.ReadFile(filepath.Join(resp.Mounts[0], "big0")); err == nil {
		t.Fatal("a read of the corrupt layer succeeded")
	}
	t.Logf("corrupt: %s", d.Stats().Layers[0].Corrupt)
}
