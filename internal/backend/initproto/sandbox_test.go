package initproto

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

func TestExecBasics(t *testing.T) {
	s := newSandbox(t, nil)
	r := s.run(t, ExecRequest{Args: []string{"echo", "hi"}})
	if r.err != nil || r.stdout != "hi\n" || r.exit.Status.ExitStatus() != 0 {
		t.Fatalf("echo hi: %+v", r)
	}
	if r := s.sh(t, "cat /proc/1/cmdline"); r.stdout != "dsec-init\x00" {
		t.Fatalf("pid 1 cmdline %q", r.stdout)
	}
	if r := s.sh(t, "hostname"); r.stdout != "sbx-test\n" {
		t.Fatalf("hostname %q", r.stdout)
	}
	if r := s.sh(t, "echo $$; pwd"); r.stdout == "1\n/\n" || !strings.HasSuffix(r.stdout, "\n/\n") {
		t.Fatalf("pid/cwd %q", r.stdout)
	}
	r = s.run(t, ExecRequest{Args: []string{"sh", "-c", "pwd; echo $FOO"}, Env: []string{"PATH=/bin", "FOO=bar"}, Cwd: "/tmp"})
	if r.stdout != "/tmp\nbar\n" {
		t.Fatalf("cwd/env %q", r.stdout)
	}
}

func TestExitStatus(t *testing.T) {
	s := newSandbox(t, nil)
	if r := s.sh(t, "exit 3"); r.exit.Status.ExitStatus() != 3 {
		t.Fatalf("exit 3: %v", r.exit.Status)
	}
	r := s.sh(t, "kill -9 $$")
	if !r.exit.Status.Signaled() || r.exit.Status.Signal() != syscall.SIGKILL {
		t.Fatalf("kill -9: %v", r.exit.Status)
	}
	if r := s.sh(t, "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done"); r.exit.UTime+r.exit.STime == 0 || r.exit.MaxRSSKB == 0 {
		t.Fatalf("no rusage: %+v", r.exit)
	}
}

func TestExecErrors(t *testing.T) {
	s := newSandbox(t, nil)
	for _, tc := range []struct {
		req   ExecRequest
		errno syscall.Errno
	}{
		{ExecRequest{Args: []string{"no-such-binary"}}, syscall.ENOENT},
		{ExecRequest{Args: []string{"/bin/nope"}}, syscall.ENOENT},
		{ExecRequest{Args: []string{"/etc/motd"}}, syscall.EACCES},
		{ExecRequest{Args: []string{"true"}, Cwd: "/nonexistent"}, syscall.ENOENT},
	} {
		r := s.run(t, tc.req)
		var ee *ExecError
		if !errors.As(r.err, &ee) || ee.Errno != tc.errno || !errors.Is(r.err, tc.errno) {
			t.Errorf("%v: got %v, want ExecError %v", tc.req.Args, r.err, tc.errno)
		}
	}
	// the init keeps serving after failures
	if r := s.run(t, ExecRequest{Args: []string{"true"}}); r.err != nil || r.exit.Status != 0 {
		t.Fatalf("true after failures: %+v", r)
	}
	c := s.dial(t)
	_, err := c.Exec(context.Background(), ExecRequest{}, [3]*os.File{})
	if !errdefs.Is(err, api.CodeInvalidArgument) {
		t.Fatalf("empty args: %v", err)
	}
}

func TestNoPrivileges(t *testing.T) {
	s := newSandbox(t, nil)
	if r := s.sh(t, "mount -t tmpfs x /tmp"); r.exit.Status.ExitStatus() == 0 {
		t.Fatalf("mount succeeded inside the sandbox")
	}
	if r := s.sh(t, "hostname other"); r.exit.Status.ExitStatus() == 0 {
		t.Fatalf("sethostname succeeded inside the sandbox")
	}
	if r := s.sh(t, "echo 1 > /proc/sysrq-trigger"); r.exit.Status.ExitStatus() == 0 {
		t.Fatalf("wrote /proc/sysrq-trigger")
	}
	if r := s.sh(t, "cat /proc/kcore | wc -c"); strings.TrimSpace(r.stdout) != "0" {
		t.Fatalf("/proc/kcore not masked: %q", r.stdout)
	}
	// root's capability sets are exactly the pinned set; NoNewPrivs set
	r := s.sh(t, "grep -E '^(Cap|NoNewPrivs)' /proc/self/status")
	want := fmt.Sprintf("CapInh:\t%016x\nCapPrm:\t%016x\nCapEff:\t%016x\nCapBnd:\t%016x\nCapAmb:\t%016x\nNoNewPrivs:\t1\n",
		0, uint64(pinnedCapsHex), uint64(pinnedCapsHex), uint64(pinnedCapsHex), 0)
	if r.stdout != want {
		t.Fatalf("status:\n%s\nwant:\n%s", r.stdout, want)
	}
	// init is not dumpable: its fds (the host log file) are out of reach
	if r := s.sh(t, "cat /proc/1/fd/1"); r.exit.Status.ExitStatus() == 0 {
		t.Fatalf("could open init's fd: %q", r.stdout)
	}
	// and it holds nothing but its own: no fd leaked from the spawner
	fdDir := fmt.Sprintf("/proc/%d/fd", s.init.PID)
	// fd 8 is the writable-layer tmpfs the host snapshots (fork, commit); the
	// sandbox cannot reach it
	if r := s.sh(t, "ls /proc/1/fd/8/upper"); r.exit.Status.ExitStatus() == 0 {
		t.Fatalf("sandbox reached init's writable-layer fd: %q", r.stdout)
	}
	var sf unix.Statfs_t
	if err := unix.Statfs(fdDir+"/8/upper", &sf); err != nil || sf.Type != unix.TMPFS_MAGIC {
		t.Errorf("init fd 8 is not the writable-layer tmpfs: %v", err)
	}
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() == "8" {
			continue
		}
		l, err := os.Readlink(filepath.Join(fdDir, e.Name()))
		if errors.Is(err, os.ErrNotExist) {
			// Closed since the listing: an fd the init held for a moment
			// (the last exec's, while it finished). A leak stays open.
			continue
		}
		if l != "/dev/null" && l != s.cfg.LogPath && l != "anon_inode:[signalfd]" && !strings.HasPrefix(l, "socket:") &&
			!isNsfs(filepath.Join(fdDir, e.Name())) { // pins the network namespace of the shared sysfs
			t.Errorf("init fd %s -> %s", e.Name(), l)
		}
	}
}

func TestRootfsLayout(t *testing.T) {
	s := newSandbox(t, nil)
	if r := s.sh(t, "cat /etc/hosts"); r.stdout != HostsFile(s.cfg.Hostname) {
		t.Errorf("/etc/hosts %q, want HostsFile(%q)", r.stdout, s.cfg.Hostname)
	}
	r := s.sh(t, `set -e
for d in null zero full random urandom tty; do test -c /dev/$d; done
test -L /dev/fd; test -L /dev/ptmx; test -c /dev/pts/ptmx; test -d /dev/shm
echo x > /dev/shm/x; echo x > /dev/null
grep -q localhost /etc/hosts
ls /sys/kernel >/dev/null
! touch /sys/kernel/x 2>/dev/null
ls /sys/class/net`)
	if r.exit.Status != 0 || r.stdout != "lo\n" {
		t.Fatalf("layout check: %v %q %q", r.exit.Status, r.stdout, r.stderr)
	}
}

func TestUpperLayer(t *testing.T) {
	s := newSandbox(t, nil)
	if r := s.sh(t, "echo data > /newfile && echo changed > /etc/motd"); r.exit.Status != 0 {
		t.Fatalf("write: %q", r.stderr)
	}
	lower := s.cfg.Lower[0]
	if _, err := os.Stat(filepath.Join(lower, "newfile")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file leaked into lower: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(lower, "etc/motd")); string(b) != "orig\n" {
		t.Fatalf("lower modified: %q", b)
	}
	root := fmt.Sprintf("/proc/%d/root", s.init.PID)
	if b, err := os.ReadFile(root + "/newfile"); err != nil || string(b) != "data\n" {
		t.Fatalf("via init root: %q %v", b, err)
	}
	if b, _ := os.ReadFile(root + "/etc/motd"); string(b) != "changed\n" {
		t.Fatalf("motd via init root: %q", b)
	}
	// the host sees neither mount
	ents, _ := os.ReadDir(s.cfg.RootDir)
	ents2, _ := os.ReadDir(s.cfg.RWDir)
	if len(ents)+len(ents2) != 0 {
		t.Fatalf("mounts visible on the host")
	}
}

func TestWritableLayerLimit(t *testing.T) {
	s := newSandbox(t, func(c *SpawnConfig) { c.RWSize = 2 << 20 })
	r := s.sh(t, "dd if=/dev/zero of=/big bs=64k count=100")
	if r.exit.Status == 0 || !strings.Contains(r.stderr, "No space left") {
		t.Fatalf("dd: %v %q", r.exit.Status, r.stderr)
	}
}

func TestTaggedAttach(t *testing.T) {
	s := newSandbox(t, nil)
	ctx := context.Background()
	c1 := s.dial(t)
	pid, err := c1.Exec(ctx, ExecRequest{Args: []string{"sh", "-c", "sleep 0.5; exit 7"}, Env: []string{"PATH=/bin"}, Tag: "bg:1"}, [3]*os.File{})
	if err != nil {
		t.Fatal(err)
	}
	c1.Close()
	// same tag while running: refused
	_, err = s.dial(t).Exec(ctx, ExecRequest{Args: []string{"true"}, Tag: "bg:1"}, [3]*os.File{})
	if !errdefs.Is(err, api.CodeConflict) {
		t.Fatalf("duplicate tag: %v", err)
	}
	ps, err := s.dial(t).PS(ctx)
	if err != nil || len(ps) != 1 || ps[0] != (TaggedProc{"bg:1", pid, true}) {
		t.Fatalf("ps: %+v %v", ps, err)
	}
	c2 := s.dial(t)
	apid, running, exit, err := c2.Attach(ctx, "bg:1")
	if err != nil || apid != pid || !running || exit != nil {
		t.Fatalf("attach: %d %v %v %v", apid, running, exit, err)
	}
	e, err := c2.Wait(ctx)
	if err != nil || e.Status.ExitStatus() != 7 {
		t.Fatalf("wait: %v %v", e.Status, err)
	}
	// after exit the record answers at once
	_, running, exit, err = s.dial(t).Attach(ctx, "bg:1")
	if err != nil || running || exit == nil || exit.Status.ExitStatus() != 7 {
		t.Fatalf("attach after exit: %v %v %v", running, exit, err)
	}
	if err := s.dial(t).Signal(ctx, "bg:1", 15); !errors.Is(err, syscall.ESRCH) || !errdefs.Is(err, api.CodeNotFound) {
		t.Fatalf("signal exited: %v", err)
	}
	if _, _, _, err := s.dial(t).Attach(ctx, "nope"); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("attach unknown: %v", err)
	}
	// SIGNAL by tag
	if _, err := s.dial(t).Exec(ctx, ExecRequest{Args: []string{"sleep", "100"}, Tag: "sl"}, [3]*os.File{}); err != nil {
		t.Fatal(err)
	}
	c3 := s.dial(t)
	if _, running, _, err := c3.Attach(ctx, "sl"); err != nil || !running {
		t.Fatalf("attach sl: %v %v", running, err)
	}
	if err := s.dial(t).Signal(ctx, "sl", int(syscall.SIGTERM)); err != nil {
		t.Fatal(err)
	}
	if e, err := c3.Wait(ctx); err != nil || e.Status.Signal() != syscall.SIGTERM {
		t.Fatalf("wait sl: %v %v", e.Status, err)
	}
	ps, err = s.dial(t).PS(ctx)
	if err != nil || len(ps) != 2 || ps[0].Running || ps[1].Running {
		t.Fatalf("ps after: %+v %v", ps, err)
	}
}

func TestKillAndWaitCancel(t *testing.T) {
	s := newSandbox(t, nil)
	c := s.dial(t)
	if _, err := c.Exec(context.Background(), ExecRequest{Args: []string{"sleep", "100"}}, [3]*os.File{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait with timeout: %v", err)
	}
	if err := c.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(int(syscall.SIGKILL)); err != nil {
		t.Fatal(err)
	}
	e, err := c.Wait(context.Background())
	if err != nil || !e.Status.Signaled() || e.Status.Signal() != syscall.SIGKILL {
		t.Fatalf("wait after kill: %v %v", e.Status, err)
	}
}

func TestConcurrentExecs(t *testing.T) {
	s := newSandbox(t, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := s.run(t, ExecRequest{Args: []string{"echo", fmt.Sprint(i)}})
			if r.err != nil || r.stdout != fmt.Sprintf("%d\n", i) || r.exit.Status != 0 {
				errs <- fmt.Errorf("exec %d: %+v", i, r)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestUserSwitch(t *testing.T) {
	s := newSandbox(t, nil)
	r := s.run(t, ExecRequest{Args: []string{"sh", "-c", "id -u; id -g; id -G; cat /proc/self/status | grep CapEff"},
		Env: []string{"PATH=/bin"}, UID: 1000, GID: 1001, Groups: []int{1001, 5}})
	if r.err != nil || !strings.HasPrefix(r.stdout, "1000\n1001\n1001 5\nCapEff:\t0000000000000000\n") {
		t.Fatalf("id: %+v", r)
	}
}

func TestInitDeath(t *testing.T) {
	s := newSandbox(t, nil)
	pidns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", s.init.PID))
	if err != nil {
		t.Fatal(err)
	}
	mntns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", s.init.PID))
	for i := range 3 {
		c := s.dial(t)
		if _, err := c.Exec(context.Background(), ExecRequest{Args: []string{"sleep", "100"}, Tag: fmt.Sprint(i)}, [3]*os.File{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(nsMembers("pid", pidns)); n != 4 {
		t.Fatalf("%d processes in the sandbox, want 4", n)
	}
	if !Alive(s.init.PID, s.init.StartTime) || Alive(s.init.PID, s.init.StartTime+1) {
		t.Fatal("Alive is wrong")
	}
	s.kill()
	if Alive(s.init.PID, s.init.StartTime) {
		t.Fatal("init still alive")
	}
	if !testwait.Until(5*time.Second, func() bool { return len(nsMembers("pid", pidns))+len(nsMembers("mnt", mntns)) == 0 }) {
		t.Fatalf("left behind: pid ns %v, mnt ns %v", nsMembers("pid", pidns), nsMembers("mnt", mntns))
	}
	if _, err := Dial(context.Background(), s.cfg.SocketPath); err == nil {
		t.Fatal("dial succeeded after init death")
	}
}

// seccompProgram returns a filter failing sethostname with EHOSTDOWN.
func seccompProgram(t *testing.T) *os.File {
	insns := [][4]uint32{
		{0x20, 0, 0, 0},                                      // ld [nr]
		{0x15, 0, 1, syscall.SYS_SETHOSTNAME},                // jeq sethostname
		{0x06, 0, 0, 0x00050000 | uint32(syscall.EHOSTDOWN)}, // ret ERRNO
		{0x06, 0, 0, 0x7fff0000},                             // ret ALLOW
	}
	var b []byte
	for _, in := range insns {
		b = binary.LittleEndian.AppendUint16(b, uint16(in[0]))
		b = append(b, byte(in[1]), byte(in[2]))
		b = binary.LittleEndian.AppendUint32(b, in[3])
	}
	p := filepath.Join(t.TempDir(), "seccomp.bpf")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestSeccomp(t *testing.T) {
	requireRoot(t)
	prog := seccompProgram(t)
	s := newSandbox(t, func(c *SpawnConfig) { c.Seccomp = prog })
	r := s.sh(t, "hostname other")
	if r.exit.Status == 0 || !strings.Contains(r.stderr, "Host is down") {
		t.Fatalf("hostname under seccomp: %v %q", r.exit.Status, r.stderr)
	}
	if r := s.sh(t, "grep Seccomp: /proc/self/status"); !strings.Contains(r.stdout, "2") {
		t.Fatalf("seccomp mode: %q", r.stdout)
	}
}

func TestSpawnFailure(t *testing.T) {
	requireRoot(t)
	cfg := sandboxConfig(t, installInit(t), "/nonexistent-lower", t.TempDir(), shortDir(t))
	called := 0
	cfg.BeforeStart = func(pid int) error { called = pid; return nil }
	_, err := Spawn(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "mount overlay") || !strings.Contains(err.Error(), "No such file") {
		t.Fatalf("spawn with missing lower: %v", err)
	}
	if called == 0 {
		t.Fatal("BeforeStart not called")
	}
	if _, err := os.Stat(cfg.SocketPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left behind: %v", err)
	}
	if err := syscall.Kill(called, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("init %d not reaped: %v", called, err)
	}

	cfg.Lower = []string{makeLower(t)}
	cfg.BeforeStart = func(int) error { return errors.New("cgroup trouble") }
	if _, err := Spawn(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "cgroup trouble") {
		t.Fatalf("BeforeStart error: %v", err)
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	cfg.Lower = []string{"/a:b"}
	if _, err := Spawn(context.Background(), cfg); err == nil {
		t.Fatal("lower with ':' accepted")
	}
}

func TestCgroupFD(t *testing.T) {
	requireRoot(t)
	base := "/sys/fs/cgroup/unified"
	if _, err := os.Stat(base + "/cgroup.procs"); err != nil {
		base = "/sys/fs/cgroup"
		if _, err := os.Stat(base + "/cgroup.controllers"); err != nil {
			t.Skip("no cgroup v2 hierarchy")
		}
	}
	dir := filepath.Join(base, fmt.Sprintf("initproto-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot create cgroup: %v", err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	// forked from this process, and cloned by a spawner helper from its
	// template namespace (clone3 with CLONE_INTO_CGROUP in the helper)
	sp, path := templateSpawner(t)
	for _, spawner := range []*Spawner{nil, sp} {
		var lower string
		s := newSandbox(t, func(c *SpawnConfig) { c.CgroupFD = fd; c.Spawner = spawner; c.InitPath = path; lower = c.Lower[0] })
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", s.init.PID))
		if !strings.Contains(string(b), "0::/"+filepath.Base(dir)+"\n") {
			t.Fatalf("spawner %v: init cgroup: %q", spawner != nil, b)
		}
		// inside, the cgroup namespace root is that cgroup
		if r := s.sh(t, "grep ^0:: /proc/self/cgroup"); r.stdout != "0::/\n" {
			t.Fatalf("spawner %v: inside cgroup: %q", spawner != nil, r.stdout)
		}
		// through the helper: its template namespace, layers handed over as fds
		if r := s.sh(t, "cat /proc/self/mountinfo"); spawner != nil && (!strings.Contains(r.stdout, "lowerdir=/rw/.lower/0") || strings.Contains(r.stdout, lower)) {
			t.Fatalf("the init in a cgroup v2 directory was not cloned from the spawner's template (lower %s):\n%s", lower, r.stdout)
		}
		s.kill() // before the cgroup dir is removed
	}
}
