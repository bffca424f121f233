// Package drivertest is the conformance suite every sandbox backend driver must
// pass. A backend's own test calls Run with a factory for fresh driver instances
// and the layers of an image that has a POSIX shell with the usual utilities (sh,
// echo, cat, sleep, id, pwd, dd, head, mv, kill, stty, tty) and either python3 or a
// busybox nc; dsec's default images (debian, busybox) both qualify. The mock
// driver runs host programs, so there the host is the image.
//
// The suite starts real sandboxes and checks what a user of the driver relies on:
// exec with streams, exit codes and signals, start failures (127/126),
// environment, working directory and credentials, tagged processes that outlive
// their connection, signals, files through the instance, dialing into the
// sandbox's loopback, Done and Destroy, recovery by a fresh driver instance after
// an agent restart, pause, the OOM flag, concurrent execs and terminals (size,
// resize, ^C, a terminal process that survives a restart). What a driver's
// Capabilities do not claim (isolation, credentials, limits, pause, tty) is
// skipped. Every sandbox it starts is destroyed when its subtest ends.
//
// Processes run with cwd "/" and name the sandbox's files by relative paths
// ("tmp/x"), so that a driver whose processes see the host's "/" (the mock)
// passes the same checks.
package drivertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/hostfeat"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/testprog"
	"github.com/dsec-dev/dsec/pkg/api"
)

// DefaultPath is the PATH the suite gives every process it starts.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// opTimeout bounds every single driver call and wait in the suite, so a broken
// driver fails a subtest instead of hanging the test binary. A microVM boot
// under TCG on a loaded 2-core machine took up to 16 s (p99) and a few boots
// passed 30 s at load 25, hence the margin.
const opTimeout = 60 * time.Second

// startTimeout bounds a Start, which for a VM driver includes its boot: as
// long as the microVM driver's own BootTimeout. One TCG boot in a full
// `make test` (two test binaries and a guest VM beside it) passed 60 s.
const startTimeout = 3 * time.Minute

// Run runs the conformance suite. newDriver returns a ready driver; every call
// must return a fresh instance with the same configuration (the recovery tests
// use a second instance the way a restarted agent would), and it registers the
// instance's own release with t.Cleanup. lower is Spec.Lower for every sandbox.
func Run(t *testing.T, newDriver func(t *testing.T) driver.Driver, layers []driver.Layer, opts ...Option) {
	s := &suite{newDriver: newDriver, layers: layers, needs: map[string][]string{}}
	for _, o := range opts {
		o(s)
	}
	probe := newDriver(t)
	s.caps = probe.Capabilities()
	for _, st := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"ExecEcho", s.testExecEcho},
		{"ExitCodesAndSignals", s.testExitCodes},
		{"StartFailure", s.testStartFailure},
		{"EnvCwdCredentials", s.testEnvCwdCredentials},
		{"TaggedProcessOutlivesConnection", s.testTagged},
		{"Signal", s.testSignal},
		{"FS", s.testFS},
		{"Dial", s.testDial},
		{"DoneAndDestroy", s.testDoneAndDestroy},
		{"Recover", s.testRecover},
		{"PauseResume", s.testPause},
		{"Snapshot", s.testSnapshot},
		{"OOMKilled", s.testOOM},
		{"ConcurrentExec", s.testConcurrentExec},
		{"TTY", s.testTTY},
		{"TTYResize", s.testTTYResize},
		{"TTYInterrupt", s.testTTYInterrupt},
		{"TTYInteractiveProgram", s.testTTYInteractive},
		{"TTYBackgroundSurvivesRestart", s.testTTYRecover},
		{"TTYStdinEOF", s.testTTYStdinEOF},
		{"TTYBadInput", s.testTTYBadInput},
	} {
		t.Run(st.name, func(t *testing.T) {
			hostfeat.Need(t, s.needs[st.name]...)
			st.run(t)
		})
	}
}

// Option adjusts the suite.
type Option func(*suite)

// NeedFeatures makes the subtest named name skip, through hostfeat, on a host
// without the features (e.g. a driver configuration that degrades there).
func NeedFeatures(name string, features ...string) Option {
	return func(s *suite) { s.needs[name] = append(s.needs[name], features...) }
}

type suite struct {
	newDriver func(t *testing.T) driver.Driver
	layers    []driver.Layer
	caps      driver.Capabilities
	needs     map[string][]string // subtest → host features (NeedFeatures)
}

// isolated reports whether the sandbox is separated from the host.
func (s *suite) isolated() bool { return s.caps.Isolation != driver.IsolationNone }

func (s *suite) needTTY(t *testing.T) {
	t.Helper()
	if !s.caps.TTY {
		t.Skip("the driver does not claim the TTY capability")
	}
}

// NewID returns a fresh short sandbox ID (unix socket paths are short).
func NewID(prefix string) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}

func (s *suite) spec(mod func(*driver.Spec)) driver.Spec {
	sp := driver.Spec{ID: NewID("dt"), Layers: s.layers, CPU: 1, Memory: 256 << 20, Disk: 64 << 20, PidsMax: 256}
	if mod != nil {
		mod(&sp)
	}
	return sp
}

// start starts a sandbox on d and destroys it when the test ends, checking that
// Destroy succeeds and Done closes.
func start(t *testing.T, d driver.Driver, spec driver.Spec) driver.Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	t0 := time.Now()
	inst, err := d.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start(%s) after %v: %v", spec.ID, time.Since(t0).Round(time.Millisecond), err)
	}
	t.Cleanup(func() { destroy(t, inst) })
	if inst.ID() != spec.ID {
		t.Errorf("ID() = %q, want %q", inst.ID(), spec.ID)
	}
	return inst
}

func destroy(t *testing.T, inst driver.Instance) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := inst.Destroy(ctx); err != nil {
		t.Errorf("Destroy(%s): %v", inst.ID(), err)
	}
	select {
	case <-inst.Done():
	case <-time.After(10 * time.Second):
		t.Errorf("Done() of %s not closed 10s after Destroy", inst.ID())
	}
}

func (s *suite) startNew(t *testing.T, mod func(*driver.Spec)) (driver.Driver, driver.Instance, driver.Spec) {
	t.Helper()
	d := s.newDriver(t)
	sp := s.spec(mod)
	return d, start(t, d, sp), sp
}

// Result is what one process did.
type Result struct {
	Stdout, Stderr string
	Exit           driver.Exit
}

// ps returns a ProcSpec for args as root in / with the suite's PATH.
func ps(args ...string) driver.ProcSpec {
	return driver.ProcSpec{Args: args, Env: []string{"PATH=" + DefaultPath}, Cwd: "/"}
}

func sh(script string) driver.ProcSpec { return ps("/bin/sh", "-c", script) }

// Exec runs p in inst with stdin fed from stdin and waits for it.
func Exec(ctx context.Context, inst driver.Instance, p driver.ProcSpec, stdin string) (Result, error) {
	var out [2]bytes.Buffer
	stdio := driver.Stdio{Stdout: &out[0], Stderr: &out[1]}
	if stdin != "" {
		stdio.Stdin = strings.NewReader(stdin)
	}
	pr, err := inst.Exec(ctx, p, stdio)
	if err != nil {
		return Result{}, err
	}
	defer pr.Close()
	ex, err := pr.Wait(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("wait: %w", err)
	}
	return Result{Stdout: out[0].String(), Stderr: out[1].String(), Exit: ex}, nil
}

// mustExec runs p and fails the test on a driver error.
func mustExec(t *testing.T, inst driver.Instance, p driver.ProcSpec) Result {
	t.Helper()
	r, err := Exec(ctxT(t), inst, p, "")
	if err != nil {
		t.Fatalf("Exec(%q): %v", p.Args, err)
	}
	return r
}

// mustSh runs a shell script and requires exit 0.
func mustSh(t *testing.T, inst driver.Instance, script string) string {
	t.Helper()
	r := mustExec(t, inst, sh(script))
	if r.Exit.Code != 0 || r.Exit.Signal != 0 {
		t.Fatalf("sh -c %q: exit %+v, stderr %q", script, r.Exit, r.Stderr)
	}
	return r.Stdout
}

// background starts a tagged process with /dev/null stdio and closes its
// connection at once.
func background(t *testing.T, inst driver.Instance, tag, script string) {
	t.Helper()
	p := sh(script)
	p.Tag = tag
	pr, err := inst.Exec(ctxT(t), p, driver.Stdio{})
	if err != nil {
		t.Fatalf("Exec(tag %s): %v", tag, err)
	}
	if pr.PID() <= 0 {
		t.Errorf("tagged process PID() = %d", pr.PID())
	}
	if err := pr.Close(); err != nil {
		t.Errorf("Close(tag %s): %v", tag, err)
	}
}

func waitExit(t *testing.T, pr driver.Proc, within time.Duration) driver.Exit {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	ex, err := pr.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return ex
}

func (s *suite) testExecEcho(t *testing.T) {
	_, inst, _ := s.startNew(t, nil)
	r := mustExec(t, inst, ps("echo", "hi"))
	if r.Stdout != "hi\n" || r.Stderr != "" {
		t.Errorf("echo hi: stdout %q stderr %q", r.Stdout, r.Stderr)
	}
	if r.Exit.Code != 0 || r.Exit.Signal != 0 || r.Exit.OOMKilled || r.Exit.StartErr != "" {
		t.Errorf("echo hi: exit %+v, want a clean 0", r.Exit)
	}
	r = mustExec(t, inst, sh("echo out; echo err >&2"))
	if r.Stdout != "out\n" || r.Stderr != "err\n" {
		t.Errorf("stdout/stderr separation: %q / %q", r.Stdout, r.Stderr)
	}
	res, err := Exec(ctxT(t), inst, ps("cat"), "via stdin\n")
	if err != nil || res.Stdout != "via stdin\n" || res.Exit.Code != 0 {
		t.Errorf("cat with stdin: %+v, %v", res, err)
	}
	// The process's stdio must block like any pipe's: a read of stdin before the
	// caller writes waits for the data, and a writer faster than the caller's
	// reader waits for room (Go creates pipes non-blocking; a driver that hands
	// them over as they are makes cat fail with EAGAIN).
	res, err = execSlow(ctxT(t), inst, sh("cat; head -c 4194304 /dev/zero"), "late stdin\n")
	if err != nil || res.Exit.Code != 0 || !strings.HasPrefix(res.Stdout, "late stdin\n") ||
		len(res.Stdout) != len("late stdin\n")+4194304 || res.Stderr != "" {
		t.Errorf("late stdin and a slow reader: exit %+v, %d bytes of stdout, stderr %q, err %v",
			res.Exit, len(res.Stdout), res.Stderr, err)
	}
}

// execSlow runs p, writes stdin only after 200ms and reads stdout slowly.
func execSlow(ctx context.Context, inst driver.Instance, p driver.ProcSpec, stdin string) (Result, error) {
	inR, inW := io.Pipe()
	defer inW.Close()
	out := &slowWriter{}
	pr, err := inst.Exec(ctx, p, driver.Stdio{Stdin: inR, Stdout: out, Stderr: out})
	if err != nil {
		return Result{}, err
	}
	defer pr.Close()
	go func() {
		time.Sleep(200 * time.Millisecond)
		_, _ = io.WriteString(inW, stdin)
		inW.Close()
	}()
	ex, err := pr.Wait(ctx)
	if err != nil {
		return Result{}, err
	}
	return Result{Stdout: out.b.String(), Exit: ex}, nil
}

// slowWriter takes a millisecond per write.
type slowWriter struct{ b bytes.Buffer }

func (w *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(time.Millisecond)
	return w.b.Write(p)
}

func (s *suite) testExitCodes(t *testing.T) {
	_, inst, _ := s.startNew(t, nil)
	for _, tc := range []struct {
		script       string
		code, signal int
	}{
		{"exit 0", 0, 0},
		{"exit 3", 3, 0},
		{"exit 255", 255, 0},
		{"kill -KILL $$", -1, int(unix.SIGKILL)},
		{"kill -TERM $$", -1, int(unix.SIGTERM)},
		{"kill -SEGV $$", -1, int(unix.SIGSEGV)},
	} {
		r := mustExec(t, inst, sh(tc.script))
		if r.Exit.Code != tc.code || r.Exit.Signal != tc.signal || r.Exit.StartErr != "" {
			t.Errorf("sh -c %q: exit %+v, want code %d signal %d", tc.script, r.Exit, tc.code, tc.signal)
		}
	}
}

func (s *suite) testStartFailure(t *testing.T) {
	_, inst, _ := s.startNew(t, nil)
	r := mustExec(t, inst, ps("/no/such/command"))
	if r.Exit.Code != 127 || r.Exit.StartErr == "" {
		t.Errorf("missing command: exit %+v, want code 127 with StartErr", r.Exit)
	}
	r = mustExec(t, inst, ps("no-such-command-in-path"))
	if r.Exit.Code != 127 || r.Exit.StartErr == "" {
		t.Errorf("missing command in PATH: exit %+v, want code 127 with StartErr", r.Exit)
	}
	mustSh(t, inst, "echo 'echo x' > tmp/noexec; chmod 644 tmp/noexec")
	r = mustExec(t, inst, ps("./tmp/noexec"))
	if r.Exit.Code != 126 || r.Exit.StartErr == "" {
		t.Errorf("non-executable file: exit %+v, want code 126 with StartErr", r.Exit)
	}
	p := ps("true")
	p.Cwd = "/no/such/dir"
	r = mustExec(t, inst, p)
	if r.Exit.Code == 0 || r.Exit.StartErr == "" {
		t.Errorf("missing cwd: exit %+v, want a start failure", r.Exit)
	}
	// The sandbox still works after failed starts.
	if out := mustSh(t, inst, "echo ok"); out != "ok\n" {
		t.Errorf("exec after start failures: %q", out)
	}
}

func (s *suite) testEnvCwdCredentials(t *testing.T) {
	_, inst, _ := s.startNew(t, nil)
	p := sh(`echo "$FOO|$EMPTY|$(pwd)|$(id -u)|$(id -g)|$(id -G)"; env | grep -c '^NOT_SET=' || true`)
	p.Env = append(p.Env, "FOO=bar baz", "EMPTY=")
	p.Cwd = "/tmp"
	if s.caps.Credentials {
		p.UID, p.GID, p.Groups = 1234, 2345, []int{3456}
	}
	t.Setenv("NOT_SET", "the test's own environment")
	r := mustExec(t, inst, p)
	lines := strings.Split(strings.TrimSuffix(r.Stdout, "\n"), "\n")
	if r.Exit.Code != 0 || len(lines) != 2 {
		t.Fatalf("env/cwd/ids: exit %+v stdout %q stderr %q", r.Exit, r.Stdout, r.Stderr)
	}
	f := strings.Split(lines[0], "|")
	cwdOK := len(f) > 2 && (f[2] == "/tmp" || !s.isolated() && strings.HasSuffix(f[2], "/tmp"))
	switch {
	case len(f) != 6 || f[0] != "bar baz" || f[1] != "" || !cwdOK:
		t.Errorf("env/cwd = %q, want bar baz||/tmp|...", lines[0])
	case !s.caps.Credentials:
	case f[3] != "1234" || f[4] != "2345":
		t.Errorf("ids = %q, want 1234|2345", lines[0])
	default:
		if groups := strings.Fields(f[5]); !contains(groups, "3456") || !contains(groups, "2345") {
			t.Errorf("id -G = %q, want 2345 and supplementary 3456", f[5])
		}
	}
	if lines[1] != "0" {
		t.Errorf("the process sees variables it was not given: %q", lines[1])
	}
	if !s.caps.Credentials {
		return
	}
	// A non-root process really is unprivileged: it cannot write root's files.
	p = sh("echo x > /etc/dt-denied")
	p.UID, p.GID = 1234, 1234
	if r := mustExec(t, inst, p); r.Exit.Code == 0 {
		t.Errorf("uid 1234 could write /etc")
	}
	// Root with an empty group list has only its primary group.
	if out := mustSh(t, inst, "id -u; id -G"); out != "0\n0\n" {
		t.Errorf("root ids = %q", out)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (s *suite) testTagged(t *testing.T) {
	_, inst, _ := s.startNew(t, nil)
	// Still running when attached.
	background(t, inst, "slow", "sleep 0.5; echo done > tmp/slow; exit 7")
	// Already finished when attached.
	background(t, inst, "fast", "exit 9")
	time.Sleep(100 * time.Millisecond)

	pr, err := inst.Attach(ctxT(t), "slow", driver.Stdio{})
	if err != nil {
		t.Fatalf("Attach(slow): %v", err)
	}
	defer pr.Close()
	if ex := waitExit(t, pr, 10*time.Second); ex.Code != 7 || ex.Signal != 0 {
		t.Errorf("attached slow process exit %+v, want code 7", ex)
	}
	if out := mustSh(t, inst, "cat tmp/slow"); out != "done\n" {
		t.Errorf("the tagged process did not run to its end after Close: %q", out)
	}
	waitFor(t, 5*time.Second, "fast process exit recorded", func() bool {
		pr, err := inst.Attach(ctxT(t), "fast", driver.Stdio{})
		if err != nil {
			t.Fatalf("Attach(fast): %v", err)
		}
		defer pr.Close()
		return waitExit(t, pr, 10*time.Second).Code == 9
	})
	// Attaching twice reports the same exit.
	pr2, err := inst.Attach(ctxT(t), "slow", driver.Stdio{})
	if err != nil {
		t.Fatalf("second Attach(slow): %v", err)
	}
	defer pr2.Close()
	if ex := waitExit(t, pr2, 10*time.Second); ex.Code != 7 {
		t.Errorf("second attach: exit %+v, want code 7", ex)
	}
	if _, err := inst.Attach(ctxT(t), "never-started", driver.Stdio{}); !errdefs.Is(err, api.CodeNotFound) {
		t.Errorf("Attach(unknown tag) = %v, want a not_found error", err)
	}
}

func (s *suite) testSignal(t *testing.T) {
	_, inst, _ := s.startNew(t, nil)
	for _, sig := range []unix.Signal{unix.SIGKILL, unix.SIGTERM} {
		pr, err := inst.Exec(ctxT(t), ps("sleep", "100"), driver.Stdio{})
		if err != nil {
			t.Fatalf("Exec(sleep): %v", err)
		}
		t0 := time.Now()
		if err := pr.Signal(int(sig)); err != nil {
			t.Errorf("Signal(%v): %v", sig, err)
		}
		ex := waitExit(t, pr, 10*time.Second)
		pr.Close()
		if ex.Code != -1 || ex.Signal != int(sig) {
			t.Errorf("sleep after %v: exit %+v", sig, ex)
		}
		if d := time.Since(t0); d > 5*time.Second {
			t.Errorf("sleep took %v to die of %v", d, sig)
		}
	}
	// Signal reaches the whole process group, not just the leader.
	pr, err := inst.Exec(ctxT(t), sh("sleep 100 & echo $! > tmp/child; wait"), driver.Stdio{})
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	waitFor(t, 5*time.Second, "child pid file", func() bool {
		return mustExec(t, inst, sh("test -s tmp/child")).Exit.Code == 0
	})
	_ = pr.Signal(int(unix.SIGKILL))
	waitExit(t, pr, 10*time.Second)
	waitFor(t, 5*time.Second, "the child of the signalled process to die", func() bool {
		return mustExec(t, inst, sh(`kill -0 "$(cat tmp/child)" 2>/dev/null`)).Exit.Code != 0
	})
}

// readFS reads a whole file through the instance's file system.
func readFS(ctx context.Context, fs session.FS, name string) ([]byte, error) {
	r, _, err := fs.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

func openFS(t *testing.T, inst driver.Instance) session.FS {
	t.Helper()
	fs, err := inst.FS(ctxT(t))
	if err != nil {
		t.Fatalf("FS: %v", err)
	}
	t.Cleanup(func() { fs.Close() })
	return fs
}

func (s *suite) testFS(t *testing.T) {
	_, inst, _ := s.startNew(t, nil)
	ctx := ctxT(t)
	fs := openFS(t, inst)
	if fi, err := fs.Stat(ctx, "/"); err != nil || fi.Type != "dir" {
		t.Fatalf("Stat(/) = %+v, %v; want a directory", fi, err)
	}
	// Host → sandbox.
	if _, err := fs.WriteFile(ctx, "/tmp/from-host", 0o644, strings.NewReader("written through FS\n"), 1<<20); err != nil {
		t.Fatalf("write through FS: %v", err)
	}
	if out := mustSh(t, inst, "cat tmp/from-host"); out != "written through FS\n" {
		t.Errorf("Exec sees %q, want the file written through FS", out)
	}
	// Sandbox → host.
	mustSh(t, inst, "echo from sandbox > tmp/from-sandbox")
	if b, err := readFS(ctx, fs, "tmp/from-sandbox"); err != nil || string(b) != "from sandbox\n" {
		t.Errorf("read through FS: %q, %v", b, err)
	}
	// Paths resolve inside the sandbox: ".." and an absolute symlink stay in it.
	mustSh(t, inst, "ln -s / tmp/abs-link")
	hostOnly, err := os.CreateTemp("", "dt-host-only-")
	if err != nil {
		t.Fatal(err)
	}
	hostOnly.Close()
	defer os.Remove(hostOnly.Name())
	for _, p := range []string{"/../../../../" + hostOnly.Name(), "tmp/abs-link" + hostOnly.Name()} {
		if _, err := readFS(ctx, fs, p); err == nil {
			t.Errorf("host file %s is reachable through FS as %s", hostOnly.Name(), p)
		}
	}
	if !s.isolated() {
		return
	}
	// The sandbox's "/" is not the host's: a host-only file is absent.
	if _, err := readFS(ctx, fs, hostOnly.Name()); err == nil {
		t.Errorf("host file %s is visible through FS", hostOnly.Name())
	}
}

// listenerScript serves "hello\n" to one TCP connection on 127.0.0.1:port,
// with python3 if the image has it, else with busybox nc.
func listenerScript(port int) driver.ProcSpec {
	script, env := testprog.Listener(port)
	p := sh(script)
	p.Env = append(p.Env, "PY="+env["PY"])
	return p
}

func (s *suite) testDial(t *testing.T) {
	_, inst, _ := s.startNew(t, nil)
	port := 8471
	if s.isolated() {
		// A port that is listening on the host must not be reachable through Dial.
		hostL, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer hostL.Close()
		hostPort := hostL.Addr().(*net.TCPAddr).Port
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if c, err := inst.Dial(ctx, hostPort); err == nil {
			c.Close()
			t.Errorf("Dial(%d) reached the host's listener: the sandbox has no network isolation", hostPort)
		}
	} else {
		// The host's loopback is shared: take a port nobody listens on.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}

	lp := listenerScript(port)
	lp.Tag = "listener"
	pr, err := inst.Exec(ctxT(t), lp, driver.Stdio{})
	if err != nil {
		t.Fatalf("start listener: %v", err)
	}
	pr.Close()
	var conn net.Conn
	deadline := time.Now().Add(15 * time.Second)
	for conn == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		conn, err = inst.Dial(ctx, port)
		cancel()
		if err != nil {
			if time.Now().After(deadline) {
				t.Fatalf("Dial(%d) never reached the listener: %v", port, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(io.LimitReader(conn, 6))
	if err != nil || string(got) != "hello\n" {
		t.Errorf("read from the sandbox's listener: %q, %v", got, err)
	}

	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	t0 := time.Now()
	if c, err := inst.Dial(ctx2, port+1); err == nil {
		c.Close()
		t.Errorf("Dial to a closed port succeeded")
	} else if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("Dial to a closed port took %v to fail (want a prompt refusal)", d)
	}
}

func (s *suite) testDoneAndDestroy(t *testing.T) {
	_, inst, _ := s.startNew(t, nil)
	select {
	case <-inst.Done():
		t.Fatal("Done() closed while the sandbox runs")
	default:
	}
	background(t, inst, "busy", "sleep 1000")
	ctx := ctxT(t)
	if err := inst.Destroy(ctx); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	select {
	case <-inst.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done() not closed after Destroy")
	}
	if err := inst.Destroy(ctx); err != nil {
		t.Errorf("second Destroy: %v (Destroy must be idempotent)", err)
	}
	if _, err := Exec(ctx, inst, ps("true"), ""); !errdefs.Is(err, api.CodeSandboxGone) {
		t.Errorf("Exec after Destroy = %v, want a sandbox_gone error", err)
	}
	if fs, err := inst.FS(ctx); err == nil {
		fs.Close()
		t.Errorf("FS after Destroy succeeded")
	}
	if _, err := inst.Attach(ctx, "busy", driver.Stdio{}); err == nil {
		t.Errorf("Attach after Destroy succeeded")
	}

	// Start with a layer that does not exist fails, and leaves the driver able
	// to start the same ID again.
	d := s.newDriver(t)
	bad := s.spec(func(sp *driver.Spec) {
		sp.Layers = []driver.Layer{{Kind: driver.LayerDir, Path: "/nonexistent/dsec-lower"}}
	})
	if inst, err := d.Start(ctxT(t), bad); err == nil {
		destroy(t, inst)
		t.Errorf("Start with a missing layer directory succeeded")
	}
	// A layer kind the driver does not take is invalid_argument.
	for _, kind := range []string{driver.LayerDir, driver.LayerEROFS, "squashfs"} {
		if contains(s.caps.LayerKinds, kind) {
			continue
		}
		bad.Layers = append([]driver.Layer{{Kind: kind, Path: "/nonexistent/dsec-layer.img"}}, s.layers...)
		if inst, err := d.Start(ctxT(t), bad); !errdefs.Is(err, api.CodeInvalidArgument) {
			if err == nil {
				destroy(t, inst)
			}
			t.Errorf("Start with a %q layer = %v, want invalid_argument (the driver takes %v)", kind, err, s.caps.LayerKinds)
		}
	}
	bad.Layers = s.layers
	inst2 := start(t, d, bad)
	if out := mustSh(t, inst2, "echo again"); out != "again\n" {
		t.Errorf("restart after failed Start: %q", out)
	}
}

func (s *suite) testRecover(t *testing.T) {
	d1, inst, sp := s.startNew(t, nil)
	mustSh(t, inst, "echo persisted > tmp/rec")
	background(t, inst, "rec", "sleep 1; exit 5")
	state := inst.State()
	if len(state) == 0 {
		t.Fatal("State() is empty")
	}
	// d1 stays open, like a crashed agent whose driver never closed.
	_ = d1

	d2 := s.newDriver(t)
	inst2, err := d2.Recover(ctxT(t), sp, state)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if inst2.ID() != sp.ID {
		t.Errorf("recovered ID() = %q, want %q", inst2.ID(), sp.ID)
	}
	select {
	case <-inst2.Done():
		t.Fatal("recovered Done() is closed while the sandbox runs")
	default:
	}
	if out := mustSh(t, inst2, "cat tmp/rec"); out != "persisted\n" {
		t.Errorf("recovered sandbox lost its file: %q", out)
	}
	pr, err := inst2.Attach(ctxT(t), "rec", driver.Stdio{})
	if err != nil {
		t.Fatalf("Attach through the recovered instance: %v", err)
	}
	if ex := waitExit(t, pr, 10*time.Second); ex.Code != 5 {
		t.Errorf("re-attached process exit %+v, want code 5", ex)
	}
	pr.Close()

	destroy(t, inst2)
	select {
	case <-inst.Done():
	case <-time.After(10 * time.Second):
		t.Error("the original instance's Done() did not close when the recovered one destroyed the sandbox")
	}

	d3 := s.newDriver(t)
	if inst3, err := d3.Recover(ctxT(t), sp, state); err == nil {
		destroy(t, inst3)
		t.Fatal("Recover of a destroyed sandbox succeeded")
	} else if !errdefs.Is(err, api.CodeNotFound) {
		t.Errorf("Recover of a destroyed sandbox = %v (code %s), want not_found", err, errdefs.CodeOf(err))
	}
	if err := d3.Cleanup(ctxT(t), sp, state); err != nil {
		t.Errorf("Cleanup after a failed Recover: %v", err)
	}
	if err := d3.Cleanup(ctxT(t), sp, state); err != nil {
		t.Errorf("second Cleanup: %v", err)
	}
}

// fileSize is the size of name in the sandbox, 0 if it does not exist yet.
func fileSize(t *testing.T, fs session.FS, name string) int64 {
	t.Helper()
	fi, err := fs.Stat(ctxT(t), name)
	if errdefs.Is(err, api.CodeNotFound) {
		return 0
	}
	if err != nil {
		t.Fatalf("stat %s: %v", name, err)
	}
	return fi.Size
}

// testPause defines what pausing means: every process of the sandbox stops making
// progress (a counter file stops growing), a new exec does not complete while
// paused, and after Resume both work again. Destroy works on a paused sandbox.
func (s *suite) testPause(t *testing.T) {
	_, inst, _ := s.startNew(t, nil)
	p, ok := inst.(driver.Pauser)
	if ok != s.caps.Pause {
		t.Fatalf("Capabilities().Pause = %v, but the instance implements driver.Pauser: %v", s.caps.Pause, ok)
	}
	if !ok {
		t.Skip("the driver does not claim the Pause capability")
	}
	root := openFS(t, inst)
	background(t, inst, "counter", "while :; do echo x >> tmp/counter; sleep 0.02; done")
	growing := func(what string) {
		t.Helper()
		s0 := fileSize(t, root, "tmp/counter")
		waitFor(t, 5*time.Second, what, func() bool { return fileSize(t, root, "tmp/counter") > s0 })
	}
	growing("counter to grow before Pause")

	if err := p.Pause(ctxT(t)); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	s1 := fileSize(t, root, "tmp/counter")
	time.Sleep(500 * time.Millisecond)
	if s2 := fileSize(t, root, "tmp/counter"); s2 != s1 {
		t.Errorf("counter grew from %d to %d while paused", s1, s2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	r, err := Exec(ctx, inst, ps("echo", "paused"), "")
	cancel()
	if err == nil {
		t.Errorf("Exec completed while paused: %+v", r)
	}

	if err := p.Resume(ctxT(t)); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	growing("counter to grow after Resume")
	if out := mustSh(t, inst, "echo resumed"); out != "resumed\n" {
		t.Errorf("Exec after Resume: %q", out)
	}
	if err := p.Pause(ctxT(t)); err != nil {
		t.Fatalf("second Pause: %v", err)
	}
	destroy(t, inst) // must work while paused; Done checked there
}

func (s *suite) testOOM(t *testing.T) {
	if !s.caps.Limits {
		t.Skip("the driver does not claim the Limits capability")
	}
	_, inst, _ := s.startNew(t, func(sp *driver.Spec) { sp.Memory = 64 << 20 })
	// dd's buffer alone is four times the limit.
	r := mustExec(t, inst, ps("dd", "if=/dev/zero", "of=/dev/null", "bs=256M", "count=1"))
	if !r.Exit.OOMKilled {
		t.Errorf("memory hog at a 64 MiB limit: exit %+v, want OOMKilled", r.Exit)
	}
	if r.Exit.Code == 0 {
		t.Errorf("memory hog exited 0")
	}
	// The sandbox survives the OOM kill of one of its processes, and the next
	// command is not blamed for it.
	r = mustExec(t, inst, ps("echo", "alive"))
	if r.Stdout != "alive\n" || r.Exit.Code != 0 || r.Exit.OOMKilled {
		t.Errorf("after OOM: %+v", r)
	}
}

func (s *suite) testConcurrentExec(t *testing.T) {
	_, inst, _ := s.startNew(t, nil)
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := strconv.Itoa(i)
			p := sh(`sleep 0.1; echo "$0"; echo "e$0" >&2`)
			p.Args = append(p.Args, want)
			r, err := Exec(ctxT(t), inst, p, "")
			switch {
			case err != nil:
				errs <- fmt.Errorf("exec %d: %w", i, err)
			case r.Exit.Code != 0 || r.Stdout != want+"\n" || r.Stderr != "e"+want+"\n":
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

// waitFor polls cond every 20ms until it holds or within passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
