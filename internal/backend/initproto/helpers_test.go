package initproto

import (
	"bytes"
	"context"
	"debug/elf"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/initbin"
	"github.com/dsec-dev/dsec/internal/mountinfo"
)

// busyboxApplets are linked into the test image's /bin.
var busyboxApplets = []string{"sh", "echo", "cat", "sleep", "ls", "hostname", "id", "mount",
	"ps", "true", "false", "dd", "test", "wc", "kill"}

func requireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root")
	}
}

// makeLower builds a minimal busybox image in a fresh directory.
func makeLower(tb testing.TB) string {
	tb.Helper()
	bb := "/bin/busybox"
	f, err := elf.Open(bb)
	if err != nil {
		tb.Skipf("no busybox: %v", err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			f.Close()
			tb.Skip("busybox is not static")
		}
	}
	f.Close()
	lower := filepath.Join(tb.TempDir(), "lower")
	for _, d := range []string{"bin", "proc", "dev", "sys", "tmp", "etc", "root"} {
		if err := os.MkdirAll(filepath.Join(lower, d), 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lower, "bin/busybox"), data, 0o755); err != nil {
		tb.Fatal(err)
	}
	for _, a := range busyboxApplets {
		if err := os.Symlink("busybox", filepath.Join(lower, "bin", a)); err != nil {
			tb.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(lower, "etc/motd"), []byte("orig\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	return lower
}

type sandbox struct {
	tb      testing.TB
	cfg     SpawnConfig
	init    *Init
	reapMu  sync.Mutex
	reaped  bool
	initBin string
}

// shortDir returns a fresh directory under /tmp, short enough for socket paths.
func shortDir(tb testing.TB) string {
	tb.Helper()
	d, err := os.MkdirTemp("/tmp", "it")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// sandboxConfig returns a config with fresh dirs below base.
func sandboxConfig(tb testing.TB, initPath, lower, base, sockDir string) SpawnConfig {
	tb.Helper()
	root, rw := filepath.Join(base, "root"), filepath.Join(base, "rw")
	for _, d := range []string{root, rw} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	return SpawnConfig{
		InitPath:   initPath,
		Hostname:   "sbx-test",
		RootDir:    root,
		RWDir:      rw,
		RWSize:     64 << 20,
		Lower:      []string{lower},
		SocketPath: filepath.Join(sockDir, "ctl"),
		LogPath:    filepath.Join(base, "init.log"),
		CgroupFD:   -1,
	}
}

// sharedSysfs mounts a shared sysfs for the test (see MountSharedSysfs) and
// unmounts it at cleanup, checking that no mount is left behind.
func sharedSysfs(tb testing.TB) string {
	tb.Helper()
	requireRoot(tb)
	dir := filepath.Join(tb.TempDir(), "sysfs")
	if err := MountSharedSysfs(dir); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := UnmountSharedSysfs(dir); err != nil {
			tb.Errorf("unmount shared sysfs: %v", err)
		}
		if m, err := mountinfo.Top(dir); err != nil || m != nil {
			tb.Errorf("shared sysfs left mounted on %s: %+v %v", dir, m, err)
		}
	})
	return dir
}

func installInit(tb testing.TB) string {
	tb.Helper()
	p, err := initbin.Install(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// newSandbox spawns an init; edit may adjust the config. The init is killed
// and reaped at cleanup.
func newSandbox(tb testing.TB, edit func(*SpawnConfig)) *sandbox {
	tb.Helper()
	requireRoot(tb)
	cfg := sandboxConfig(tb, installInit(tb), makeLower(tb), tb.TempDir(), shortDir(tb))
	cfg.SysfsPath = sharedSysfs(tb)
	if edit != nil {
		edit(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in, err := Spawn(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	s := &sandbox{tb: tb, cfg: cfg, init: in}
	tb.Cleanup(s.kill)
	return s
}

// kill SIGKILLs and reaps the init once.
func (s *sandbox) kill() {
	s.reapMu.Lock()
	defer s.reapMu.Unlock()
	if !s.reaped {
		killAndReap(s.init.PID)
		s.reaped = true
	}
}

func (s *sandbox) dial(tb testing.TB) *Conn {
	tb.Helper()
	c, err := Dial(context.Background(), s.cfg.SocketPath)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

type result struct {
	stdout, stderr string
	exit           Exit
	err            error // exec error
}

// run executes a process on a new connection and collects its output.
func (s *sandbox) run(tb testing.TB, req ExecRequest) result {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Dial(ctx, s.cfg.SocketPath)
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		tb.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		tb.Fatal(err)
	}
	_, err = c.Exec(ctx, req, [3]*os.File{nil, outW, errW})
	outW.Close()
	errW.Close()
	var out, serr bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); io.Copy(&out, outR) }()
	go func() { defer wg.Done(); io.Copy(&serr, errR) }()
	var exit Exit
	if err == nil {
		exit, err = c.Wait(ctx)
		if err != nil {
			tb.Fatalf("wait: %v", err)
		}
	}
	wg.Wait()
	outR.Close()
	errR.Close()
	return result{out.String(), serr.String(), exit, err}
}

// sh runs a shell command as root and fails the test on exec errors.
func (s *sandbox) sh(tb testing.TB, script string) result {
	tb.Helper()
	r := s.run(tb, ExecRequest{Args: []string{"sh", "-c", script}, Env: []string{"PATH=/bin"}})
	if r.err != nil {
		tb.Fatalf("exec sh -c %q: %v", script, r.err)
	}
	return r
}

// nsMembers returns the host pids whose namespace link ns (e.g. "pid")
// equals target.
func nsMembers(ns, target string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", ns)); err == nil && l == target {
			pids = append(pids, pid)
		}
	}
	return pids
}
