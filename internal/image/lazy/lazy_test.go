package lazy

import (
	"bytes"
	"context"
	"crypto/rand"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/pkg/api"
)

func TestMain(m *testing.M) {
	MaybeMain()
	os.Exit(m.Run())
}

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := exec.LookPath("mkfs.erofs"); err != nil {
		t.Skip("needs mkfs.erofs (erofs-utils)")
	}
}

// counting wraps a store and counts range reads.
type counting struct {
	blob.Store
	calls, bytes atomic.Int64
}

func (c *counting) ReadAt(ctx context.Context, d string, p []byte, off int64) (int, error) {
	n, err := c.Store.ReadAt(ctx, d, p, off)
	c.calls.Add(1)
	c.bytes.Add(int64(n))
	return n, err
}

// buildLayer makes an EROFS image of 8 files of 1 MiB random data (f0..f7) plus a
// small text file, puts it in a fresh blob dir, and returns the store dir, the
// digest and the raw blob.
func buildLayer(t testing.TB) (string, string, []byte) {
	t.Helper()
	_, storeDir, dg, raw := buildLayerSrc(t)
	return storeDir, dg, raw
}

// buildLayerSrc is buildLayer that also returns the source directory.
func buildLayerSrc(t testing.TB) (src, storeDir, digest string, raw []byte) {
	t.Helper()
	src = t.TempDir()
	for i := 0; i < 8; i++ {
		b := make([]byte, 1<<20)
		_, _ = rand.Read(b)
		if err := os.WriteFile(filepath.Join(src, "f"+string(rune('0'+i))), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "hello.txt"), []byte("hello from erofs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(t.TempDir(), "layer.erofs")
	if out, err := exec.Command("mkfs.erofs", "--quiet", "-T0", img, src).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.erofs: %v %s", err, out)
	}
	raw, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	storeDir = t.TempDir()
	st, err := blob.NewDir(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	dg := blob.FromBytes(raw)
	if err := st.Put(context.Background(), dg, bytes.NewReader(raw), int64(len(raw))); err != nil {
		t.Fatal(err)
	}
	return src, storeDir, dg, raw
}

func mountsUnder(t testing.TB, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir) {
			out = append(out, f[4])
		}
	}
	return out
}

func newTestDaemon(t testing.TB, cfg Config) *Daemon {
	t.Helper()
	if cfg.Root == "" {
		cfg.Root = t.TempDir()
	}
	d, err := NewDaemon(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Close()
		if m := mountsUnder(t, cfg.Root); len(m) > 0 {
			t.Errorf("left mounted: %v", m)
		}
	})
	return d
}

func TestReadsFetchOnlyTouchedChunks(t *testing.T) {
	needRoot(t)
	storeDir, dg, raw := buildLayer(t)
	d := newTestDaemon(t, Config{ChunkSize: 64 << 10, Grace: time.Hour})
	st, _ := OpenStore("dir:" + storeDir)
	cs := &counting{Store: st}
	d.stores["test"] = cs
	resp, err := d.Acquire(context.Background(), AcquireRequest{Holder: "a", Layers: []image.Layer{{Digest: dg, Store: "test"}}})
	if err != nil {
		t.Fatal(err)
	}
	mnt := resp.Mounts[0]
	b, err := os.ReadFile(filepath.Join(mnt, "hello.txt"))
	if err != nil || string(b) != "hello from erofs\n" {
		t.Fatalf("read hello: %q %v", b, err)
	}
	afterSmall := cs.bytes.Load()
	f3, err := os.ReadFile(filepath.Join(mnt, "f3"))
	if err != nil || len(f3) != 1<<20 {
		t.Fatalf("read f3: %d %v", len(f3), err)
	}
	fetched := cs.bytes.Load()
	t.Logf("blob %d bytes; metadata+hello fetched %d in %d calls; +f3 fetched %d", len(raw), afterSmall, cs.calls.Load(), fetched)
	if afterSmall > 4*64<<10 {
		t.Errorf("reading a small file fetched %d bytes", afterSmall)
	}
	if fetched > 1<<20+6*64<<10 || fetched >= int64(len(raw))/2 {
		t.Errorf("reading one 1 MiB file of %d fetched %d bytes", len(raw), fetched)
	}
	// Read again: the page cache or the chunk cache serves it; at most the block
	// device's readahead past the file (128 KiB) is fetched.
	if _, err := os.ReadFile(filepath.Join(mnt, "f3")); err != nil {
		t.Fatal(err)
	}
	if cs.bytes.Load() > fetched+128<<10 {
		t.Errorf("re-read fetched %d more bytes", cs.bytes.Load()-fetched)
	}
	s := d.Stats()
	if len(s.Layers) != 1 || s.Layers[0].FetchedBytes != cs.bytes.Load() || s.Layers[0].CacheMisses == 0 {
		t.Errorf("stats %+v", s.Layers)
	}
	d.Release("a")
}

func TestCacheEviction(t *testing.T) {
	c, err := NewCache(t.TempDir(), 3*1000)
	if err != nil {
		t.Fatal(err)
	}
	for i := int64(0); i < 5; i++ {
		if err := c.Put(chunkKey{"x", i}, make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			c.ReadAt(chunkKey{"x", 0}, make([]byte, 10), 0) // 0 becomes hot
		}
	}
	if st := c.Stats(); st.Bytes != 3000 || st.Chunks != 3 || st.Evicted != 2 {
		t.Fatalf("stats %+v", st)
	}
	for i, want := range []bool{true, false, false, true, true} {
		if c.Has(chunkKey{"x", int64(i)}) != want {
			t.Errorf("chunk %d cached = %v", i, !want)
		}
	}
	// A new cache over the same dir re-indexes what is there.
	c2, _ := NewCache(c.dir, 3000)
	if st := c2.Stats(); st.Chunks != 3 {
		t.Errorf("re-index: %+v", st)
	}
}

func TestRefcountUnmount(t *testing.T) {
	needRoot(t)
	storeDir, dg, _ := buildLayer(t)
	d := newTestDaemon(t, Config{Grace: 100 * time.Millisecond})
	ref := []image.Layer{{Digest: dg, Store: "dir:" + storeDir}}
	r1, err := d.Acquire(context.Background(), AcquireRequest{Holder: "a", Layers: ref})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := d.Acquire(context.Background(), AcquireRequest{Holder: "b", Layers: ref})
	if err != nil {
		t.Fatal(err)
	}
	if r1.Mounts[0] != r2.Mounts[0] {
		t.Fatalf("two mounts for one layer: %v %v", r1, r2)
	}
	if n := len(mountsUnder(t, r1.Mounts[0])); n != 1 {
		t.Fatalf("%d mounts at %s", n, r1.Mounts[0])
	}
	d.Release("a")
	time.Sleep(300 * time.Millisecond)
	d.reap()
	if n := len(mountsUnder(t, r1.Mounts[0])); n != 1 {
		t.Fatalf("unmounted while held by b")
	}
	d.Sync([]string{"c"}) // b is gone
	d.reap()
	if n := len(mountsUnder(t, r1.Mounts[0])); n != 1 {
		t.Fatalf("unmounted before the grace period")
	}
	time.Sleep(200 * time.Millisecond)
	d.reap()
	if n := len(mountsUnder(t, r1.Mounts[0])); n != 0 {
		t.Fatalf("still mounted after grace")
	}
}

func TestBadLayers(t *testing.T) {
	needRoot(t)
	storeDir, dg, raw := buildLayer(t)
	d := newTestDaemon(t, Config{Grace: time.Hour})
	good := image.Layer{Digest: dg, Store: "dir:" + storeDir}
	ctx := context.Background()
	if _, err := d.Acquire(ctx, AcquireRequest{Holder: "ok", Layers: []image.Layer{good}}); err != nil {
		t.Fatal(err)
	}
	st, _ := blob.NewDir(storeDir)
	put := func(b []byte) string {
		dg := blob.FromBytes(b)
		if err := st.Put(ctx, dg, bytes.NewReader(b), int64(len(b))); err != nil {
			t.Fatal(err)
		}
		return dg
	}
	// Garbage under its own digest: not an EROFS image.
	garbage := put(bytes.Repeat([]byte("x"), 1<<20))
	// The real image with one byte flipped, stored under the real image's digest.
	flipped := append([]byte(nil), raw...)
	flipped[len(flipped)/2] ^= 0xff
	fdg := "sha256:" + strings.Repeat("ab", 32)
	if err := os.WriteFile(filepath.Join(storeDir, "sha256", fdg[7:]), flipped, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		ref      image.Layer
		prefetch string
		code     api.Code
	}{
		{"not erofs", image.Layer{Digest: garbage, Store: good.Store}, "", api.CodeBadGateway},
		{"digest mismatch on full fetch", image.Layer{Digest: fdg, Store: good.Store}, "full", api.CodeBadGateway},
		{"truncated (size)", image.Layer{Digest: fdg, Store: good.Store, Size: int64(len(raw)) + 4096}, "", api.CodeBadGateway},
		{"missing layer", image.Layer{Digest: "sha256:" + strings.Repeat("0", 64), Store: good.Store}, "", api.CodeNotFound},
		{"unreachable store", image.Layer{Digest: fdg, Store: "dir:/nonexistent/store"}, "", api.CodeUnavailable},
	}
	for _, c := range cases {
		// The good layer comes first in the request: it must not stay held.
		_, err := d.Acquire(ctx, AcquireRequest{Holder: "bad", Layers: []image.Layer{good, c.ref}, Prefetch: c.prefetch})
		if errdefs.CodeOf(err) != c.code {
			t.Errorf("%s: got %v (code %s), want %s", c.name, err, errdefs.CodeOf(err), c.code)
		} else {
			t.Logf("%s: %v", c.name, err)
		}
	}
	s := d.Stats()
	if len(s.Layers) != 1 || s.Layers[0].Digest != dg || s.Layers[0].Refs != 1 {
		t.Errorf("after failures: %+v", s.Layers)
	}
	if m := mountsUnder(t, d.cfg.Root); len(m) != 2 { // fuse + the good layer
		t.Errorf("mounts after failures: %v", m)
	}
}

// TestClientLayerd starts layerd through the client (this test binary, via
// TestMain), acquires through it, stops it by PID and checks that nothing is left:
// no process, no mount, no loop device on the blob file.
func TestClientLayerd(t *testing.T) {
	needRoot(t)
	storeDir, dg, _ := buildLayer(t)
	ctx := context.Background()
	root := t.TempDir()
	c := NewClient(Config{Root: root, Grace: time.Hour, LoopDevice: true}) // the fallback path
	// Without layerd there is nothing held: these answer without starting one.
	if err := c.Release(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if err := c.Sync(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if s, err := c.Stats(ctx); err != nil || len(s.Layers) != 0 {
		t.Fatalf("stats without layerd: %+v %v", s, err)
	}
	if _, ok := c.Running(ctx); ok {
		t.Fatal("layerd started by release/sync/stats")
	}
	ref := []image.Layer{{Digest: dg, Store: "dir:" + storeDir}}
	m, err := c.Acquire(ctx, AcquireRequest{Holder: "a", Layers: ref})
	if err != nil {
		t.Fatal(err)
	}
	pid, ok := c.Running(ctx)
	if !ok {
		t.Fatal("layerd not running after acquire")
	}
	t.Cleanup(func() {
		_ = c.Stop(context.Background())
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("layerd %d still running", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if b, err := os.ReadFile(filepath.Join(m[0], "hello.txt")); err != nil || string(b) != "hello from erofs\n" {
		t.Fatalf("read through layerd: %q %v", b, err)
	}
	s, err := c.Stats(ctx)
	if err != nil || len(s.Layers) != 1 {
		t.Fatalf("stats: %+v %v", s, err)
	}
	l := s.Layers[0]
	t.Logf("loop %s, direct I/O %v, readahead %d KiB", l.LoopDevice, l.LoopDirectIO, l.ReadAheadKB)
	if !strings.HasPrefix(l.LoopDevice, "/dev/loop") || l.ReadAheadKB != DefaultReadAheadKB {
		t.Errorf("loop device: %+v", l)
	}
	// Acquire on a mounted layer is one round trip to layerd.
	const n = 200
	t0 := time.Now()
	for i := 0; i < n; i++ {
		if _, err := c.Acquire(ctx, AcquireRequest{Holder: "b", Layers: ref}); err != nil {
			t.Fatal(err)
		}
		if err := c.Release(ctx, "b"); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("acquire+release of a mounted layer: %.3f ms", float64(time.Since(t0).Microseconds())/1000/n)
	loop := l.LoopDevice
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if syscall.Kill(pid, 0) == nil {
		t.Errorf("layerd %d still running after Stop", pid)
	}
	if ms := mountsUnder(t, root); len(ms) > 0 {
		t.Errorf("left mounted: %v", ms)
	}
	// Autoclear: the loop device detached with the unmount.
	b, _ := os.ReadFile("/sys/block/" + strings.TrimPrefix(loop, "/dev/") + "/loop/backing_file")
	if strings.Contains(string(b), root) {
		t.Errorf("%s still attached to %s", loop, strings.TrimSpace(string(b)))
	}
}

// TestFileBackedMount mounts erofs on the FUSE blob file itself (no loop device):
// possible because layerd's FUSE mount does not negotiate passthrough.
func TestFileBackedMount(t *testing.T) {
	needRoot(t)
	storeDir, dg, _ := buildLayer(t)
	d := newTestDaemon(t, Config{Grace: time.Hour})
	resp, err := d.Acquire(context.Background(), AcquireRequest{Holder: "a", Layers: []image.Layer{{Digest: dg, Store: "dir:" + storeDir}}})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(resp.Mounts[0], "hello.txt")); err != nil || string(b) != "hello from erofs\n" {
		t.Fatalf("read hello: %q %v", b, err)
	}
	if s := d.Stats(); len(s.Layers) != 1 || s.Layers[0].LoopDevice != "" {
		t.Errorf("file-backed mount went through a loop device: %+v", s.Layers)
	}
	d.Release("a")
}
