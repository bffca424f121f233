package lazy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/testwait"
)

// span is one read(2) a reader made.
type span struct {
	start, end time.Time
	err        error
}

// lazyReader reads files of a mounted layer in small pieces, timing each read,
// and checks what it read against the source.
type lazyReader struct {
	mu    sync.Mutex
	reads []span
	bad   []string
	done  chan struct{}
}

func startReader(mnt, src string, names []string, piece int) *lazyReader {
	r := &lazyReader{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for _, name := range names {
			want, _ := os.ReadFile(filepath.Join(src, name))
			f, err := os.Open(filepath.Join(mnt, name))
			if err != nil {
				r.fail(fmt.Sprintf("open %s: %v", name, err))
				return
			}
			got := make([]byte, 0, len(want))
			buf := make([]byte, piece)
			for {
				t0 := time.Now()
				n, err := f.Read(buf)
				r.mu.Lock()
				r.reads = append(r.reads, span{t0, time.Now(), err})
				r.mu.Unlock()
				got = append(got, buf[:n]...)
				if err != nil {
					if !errors.Is(err, io.EOF) {
						r.fail(fmt.Sprintf("read %s at %d: %v", name, len(got), err))
					}
					break
				}
			}
			f.Close()
			if !bytes.Equal(got, want) {
				r.fail(fmt.Sprintf("%s: read %d bytes that differ from the %d written", name, len(got), len(want)))
			}
		}
	}()
	return r
}

func (r *lazyReader) fail(s string) {
	r.mu.Lock()
	r.bad = append(r.bad, s)
	r.mu.Unlock()
}

func (r *lazyReader) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reads)
}

// longestAround is the longest read that was running at t or started within
// slack after it (the reads a kill at t delays).
func (r *lazyReader) longestAround(t time.Time, slack time.Duration) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var m time.Duration
	for _, s := range r.reads {
		if s.end.After(t) && s.start.Before(t.Add(slack)) {
			m = max(m, s.end.Sub(s.start))
		}
	}
	return m
}

// layerdProcs lists layerd and holder processes whose config names root.
func layerdProcs(root string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || zombie(pid) {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if (bytes.HasPrefix(kv, []byte(EnvMain+"=")) || bytes.HasPrefix(kv, []byte(EnvHolder+"="))) && bytes.Contains(kv, []byte(root)) {
				out = append(out, pid)
			}
		}
	}
	return out
}

// loopsOn lists loop devices whose backing file is under root.
func loopsOn(root string) []string {
	var out []string
	ms, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, m := range ms {
		if b, _ := os.ReadFile(m); strings.HasPrefix(string(b), root) {
			out = append(out, m)
		}
	}
	return out
}

// checkNothingLeft fails t if anything of layerd's for root is left: processes,
// mounts, loop devices.
func checkNothingLeft(t *testing.T, root string) {
	t.Helper()
	testwait.Until(5*time.Second, func() bool { return len(layerdProcs(root)) == 0 })
	if ps := layerdProcs(root); len(ps) > 0 {
		t.Errorf("layerd processes left: %v", ps)
		for _, p := range ps {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	}
	if m := mountsUnder(t, root); len(m) > 0 {
		t.Errorf("left mounted: %v", m)
		Cleanup(root)
	}
	if l := loopsOn(root); len(l) > 0 {
		t.Errorf("loop devices left on %s: %v", root, l)
	}
}

// TestLayerdKill9DuringReads kills layerd with SIGKILL again and again while a
// reader reads uncached files of a lazily mounted layer (every chunk fetch waits
// 25 ms for its store). The holder starts layerd again, which takes the FUSE
// connection over: every read completes with the right bytes, none fails, the
// layer keeps its holder, and once layerd is stopped nothing is left. The longest
// read around each kill is the pause a reader sees.
func TestLayerdKill9DuringReads(t *testing.T) {
	for _, loop := range []bool{false, true} {
		t.Run(map[bool]string{false: "file-backed", true: "loop-device"}[loop], func(t *testing.T) {
			testKill9(t, loop)
		})
	}
}

func testKill9(t *testing.T, loop bool) {
	needRoot(t)
	src, storeDir, dg, _ := buildLayerSrc(t)
	ctx := context.Background()
	root := t.TempDir()
	c := NewClient(Config{Root: root, Grace: time.Hour, LoopDevice: loop})
	t.Cleanup(func() {
		if os.Getenv("DSEC_TEST_LAYERD_LOG") != "" {
			b, _ := os.ReadFile(filepath.Join(root, "layerd.log"))
			t.Logf("layerd.log:\n%s", b)
		}
		if err := c.Stop(context.Background()); err != nil {
			t.Error(err)
		}
		checkNothingLeft(t, root)
	})
	m, err := c.Acquire(ctx, AcquireRequest{Holder: "sandbox-1", Layers: []image.Layer{{Digest: dg, Store: "dir:" + storeDir + ";latency=25ms"}}})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(m[0], "hello.txt")); err != nil || string(b) != "hello from erofs\n" {
		t.Fatalf("read hello: %q %v", b, err)
	}
	names := []string{"f0", "f1", "f2", "f3", "f4", "f5", "f6", "f7"}
	r := startReader(m[0], src, names, 16<<10)
	const kills = 5
	var pauses, restarts []time.Duration
	var killedAt []time.Time
	seen := map[int]bool{}
	for i := 0; i < kills; i++ {
		// Let the reader get going (and the new layerd serve a few reads).
		for n, t0 := r.count(), time.Now(); r.count() < n+4; {
			select {
			case <-r.done:
				t.Fatalf("reader finished after %d kills (of %d): %v", i, kills, r.bad)
			case <-time.After(5 * time.Millisecond):
			}
			if time.Since(t0) > 20*time.Second {
				t.Fatalf("reader stuck after %d kills: no read completed in 20 s", i)
			}
		}
		pid, ok := c.Running(ctx)
		if !ok {
			t.Fatal("layerd not answering")
		}
		if seen[pid] {
			t.Fatalf("layerd %d again: not restarted?", pid)
		}
		seen[pid] = true
		t0 := time.Now()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killedAt = append(killedAt, t0)
		// Wait until a new layerd answers: the holder starts one; if none
		// answers within 2 s, the test starts one as the server would on its next
		// acquire.
		for {
			if p2, ok := c.Running(ctx); ok && p2 != pid {
				break
			}
			if time.Since(t0) > 2*time.Second {
				t.Logf("no layerd 2 s after the kill of %d: starting one", pid)
				if _, err := c.Ensure(ctx); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		restarts = append(restarts, time.Since(t0))
	}
	select {
	case <-r.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("reader hung after the kills (%d reads done)", r.count())
	}
	for _, k := range killedAt {
		pauses = append(pauses, r.longestAround(k, 20*time.Millisecond))
	}
	if len(r.bad) > 0 {
		t.Fatalf("reader errors across %d kills: %v", kills, r.bad)
	}
	slices.Sort(pauses)
	slices.Sort(restarts)
	var normal []time.Duration
	for _, s := range r.reads {
		normal = append(normal, s.end.Sub(s.start))
	}
	slices.Sort(normal)
	t.Logf("%d reads of 16 KiB, none failed, content verified; read p50 %v p99 %v", len(r.reads),
		normal[len(normal)/2].Round(time.Microsecond), normal[len(normal)*99/100].Round(time.Microsecond))
	t.Logf("across %d kill -9s: restart (kill to new layerd answering) p50 %v max %v; longest read around a kill p50 %v max %v",
		kills, restarts[kills/2].Round(time.Millisecond), restarts[kills-1].Round(time.Millisecond),
		pauses[kills/2].Round(time.Millisecond), pauses[kills-1].Round(time.Millisecond))
	s, err := c.Stats(ctx)
	if err != nil || len(s.Layers) != 1 || !slices.Equal(s.Layers[0].Holders, []string{"sandbox-1"}) || !s.Layers[0].Mounted {
		t.Fatalf("after the kills: %+v %v", s, err)
	}
	// The layer is still acquirable (same mount) and releasable.
	m2, err := c.Acquire(ctx, AcquireRequest{Holder: "sandbox-2", Layers: []image.Layer{{Digest: dg, Store: "dir:" + storeDir}}})
	if err != nil || m2[0] != m[0] {
		t.Fatalf("acquire after the kills: %v %v", m2, err)
	}
	if n := len(mountsUnder(t, m[0])); n != 1 {
		t.Fatalf("%d mounts at %s", n, m[0])
	}
}

// dropCaches drops the clean page cache of the files under dir (and of the FUSE
// blob file), so that the next reads go to layerd again.
func dropCaches(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
}

// TestHolderKill9 kills the holder: layerd starts a new one, which holds the
// connection through a later kill -9 of layerd; uncached reads then still return
// the right bytes.
func TestHolderKill9(t *testing.T) {
	needRoot(t)
	src, storeDir, dg, _ := buildLayerSrc(t)
	ctx := context.Background()
	root := t.TempDir()
	c := NewClient(Config{Root: root, Grace: time.Hour})
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Error(err)
		}
		checkNothingLeft(t, root)
	})
	m, err := c.Acquire(ctx, AcquireRequest{Holder: "a", Layers: []image.Layer{{Digest: dg, Store: "dir:" + storeDir}}})
	if err != nil {
		t.Fatal(err)
	}
	var h1 int
	testwait.For(t, 5*time.Second, "a holder", func() bool { h1 = HolderPid(root); return h1 != 0 })
	if err := syscall.Kill(h1, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var h2 int
	testwait.For(t, 10*time.Second, "a new holder after the kill of the holder", func() bool {
		h2 = HolderPid(root)
		return h2 != 0 && h2 != h1
	})
	// Holder changes since the last save of the state are in the journal.
	for _, h := range []string{"b", "c"} {
		if _, err := c.Acquire(ctx, AcquireRequest{Holder: h, Layers: []image.Layer{{Digest: dg, Store: "dir:" + storeDir}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Release(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	pid, _ := c.Running(ctx)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "layerd restarted by the new holder", func() bool {
		p, ok := c.Running(ctx)
		return ok && p != pid
	})
	if hs := c.stats(t, dg).Holders; !slices.Equal(slices.Sorted(slices.Values(hs)), []string{"a", "c"}) {
		t.Fatalf("holders after the takeover: %v, want [a c]", hs)
	}
	hex := strings.TrimPrefix(dg, "sha256:")
	for _, name := range []string{"f1", "f6"} {
		dropCaches(t, filepath.Join(m[0], name), filepath.Join(FuseDir(root), hex))
		s0 := c.stats(t, dg)
		got, err := os.ReadFile(filepath.Join(m[0], name))
		want, _ := os.ReadFile(filepath.Join(src, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("read %s after holder and layerd kills: %d bytes, %v", name, len(got), err)
		}
		if s := c.stats(t, dg); s.CacheHits+s.CacheMisses == s0.CacheHits+s0.CacheMisses {
			t.Errorf("read of %s did not reach layerd (caches not dropped?)", name)
		}
	}
}

func (c *Client) stats(t *testing.T, digest string) LayerStats {
	t.Helper()
	s, err := c.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range s.Layers {
		if l.Digest == digest {
			return l
		}
	}
	t.Fatalf("layer %s not in stats %+v", digest, s)
	return LayerStats{}
}

// TestStopWhileInUse stops layerd while a file of a layer is still open (a
// forced stop with a sandbox left): layerd and its holder exit promptly instead
// of waiting for the reader, the reader gets an error rather than a hang, and
// once it closes the file nothing is left.
func TestStopWhileInUse(t *testing.T) {
	needRoot(t)
	_, storeDir, dg, _ := buildLayerSrc(t)
	ctx := context.Background()
	root := t.TempDir()
	c := NewClient(Config{Root: root, Grace: time.Hour})
	m, err := c.Acquire(ctx, AcquireRequest{Holder: "a", Layers: []image.Layer{{Digest: dg, Store: "dir:" + storeDir}}})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(m[0], "f4"))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("stop with a file open took %v", time.Since(t0).Round(time.Millisecond))
	if time.Since(t0) > 10*time.Second {
		t.Errorf("stop took %v", time.Since(t0))
	}
	done := make(chan error, 1)
	go func() { _, err := f.Read(make([]byte, 4096)); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("read of a layer whose layerd was stopped succeeded")
		}
		t.Logf("read after stop: %v", err)
	case <-time.After(10 * time.Second):
		t.Error("read after stop hangs")
	}
	f.Close()
	checkNothingLeft(t, root)
}

// TestReapKeepsBusyLayer: a layer without holders that is still in use (its
// holder lost, say) is not pulled from under its reader when its grace period
// ends; it is unmounted once nothing uses it.
func TestReapKeepsBusyLayer(t *testing.T) {
	needRoot(t)
	storeDir, dg, _ := buildLayer(t)
	d := newTestDaemon(t, Config{Grace: 100 * time.Millisecond})
	resp, err := d.Acquire(context.Background(), AcquireRequest{Holder: "a", Layers: []image.Layer{{Digest: dg, Store: "dir:" + storeDir}}})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(resp.Mounts[0], "f1"))
	if err != nil {
		t.Fatal(err)
	}
	d.Release("a")
	time.Sleep(150 * time.Millisecond)
	d.reap()
	if _, err := f.Read(make([]byte, 4096)); err != nil {
		t.Fatalf("read of a busy layer after its grace period: %v", err)
	}
	if n := len(mountsUnder(t, resp.Mounts[0])); n != 1 {
		t.Fatalf("busy layer unmounted (%d mounts)", n)
	}
	f.Close()
	time.Sleep(150 * time.Millisecond)
	d.reap()
	if n := len(mountsUnder(t, resp.Mounts[0])); n != 0 {
		t.Fatalf("idle layer still mounted after its grace period")
	}
}
