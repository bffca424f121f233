package agent_test

// The agent's tests that need no real isolation run on the mock driver, as any
// user and without images (go test ./internal/agent -run Mock). See the README.

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/drivertest"
	"github.com/dsec-dev/dsec/internal/backend/driver/mock"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// mockEnv is a node whose backends are mock drivers on one mock host: Managers
// opened on it share the host, the driver state and the agent data dir, like an
// agent restarting on the same machine.
type mockEnv struct {
	host     *mock.Host
	dataDir  string
	stateDir string
	store    *image.Store
	maxLog   int64 // agent.Config.MaxLogBytes
	warm     int   // agent.Config.WarmPool
}

// newMockEnv makes a tiny image (an /etc/passwd is all the agent reads) and an
// empty node. It needs no root and no built images.
func newMockEnv(t testing.TB) *mockEnv {
	t.Helper()
	imgs := t.TempDir()
	rootfs := filepath.Join(imgs, "tiny", "rootfs")
	if err := os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	passwd := "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
	if err := os.WriteFile(filepath.Join(rootfs, "etc", "passwd"), []byte(passwd), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(imgs, "tiny", "image.json"), []byte(`{"name":"tiny","lower":["rootfs"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	e := &mockEnv{host: mock.NewHost(), dataDir: t.TempDir(), stateDir: t.TempDir(),
		store: &image.Store{Dir: imgs, Default: "tiny"}}
	t.Cleanup(func() {
		if ents, _ := os.ReadDir(filepath.Join(e.dataDir, "sandboxes")); len(ents) > 0 {
			t.Errorf("records left behind: %d", len(ents))
		}
		if ents, _ := os.ReadDir(e.stateDir); len(ents) > 0 {
			var names []string
			for _, x := range ents {
				names = append(names, x.Name())
			}
			t.Errorf("sandbox roots left behind: %v", names)
		}
	})
	return e
}

// driver returns a mock driver named name ("" = mock) on the env's host.
func (e *mockEnv) driver(t testing.TB, name string, noTTY bool) driver.Driver {
	t.Helper()
	d, err := mock.New(mock.Config{Host: e.host, StateDir: e.stateDir, BackendName: name, NoTTY: noTTY})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// open starts a Manager on drivers (default: one mock). When the test ends it
// deletes the sandboxes it still has and closes it.
func (e *mockEnv) open(t testing.TB, drivers ...driver.Driver) *agent.Manager {
	t.Helper()
	if len(drivers) == 0 {
		drivers = []driver.Driver{e.driver(t, "", false)}
	}
	reg, err := driver.NewRegistry(drivers...)
	if err != nil {
		t.Fatal(err)
	}
	m, err := agent.New(ctxT(t), agent.Config{DataDir: e.dataDir, Drivers: reg, Images: e.store, Node: "test", MaxLogBytes: e.maxLog, WarmPool: e.warm})
	if err != nil {
		t.Fatalf("agent.New: %v", err)
	}
	t.Cleanup(func() {
		if err := m.DeleteAll(ctxT(t)); err != nil {
			t.Errorf("DeleteAll: %v", err)
		}
		m.Close()
	})
	return m
}

func TestMockExec(t *testing.T) {
	e := newMockEnv(t)
	m := e.open(t)
	sb := create(t, m, api.CreateSandboxRequest{Env: map[string]string{"FROM_CREATE": "c"}})
	if sb.Backend != mock.Name {
		t.Errorf("backend %q, want the registry's default %q", sb.Backend, mock.Name)
	}
	res := execOK(t, m, sb.ID, api.ExecRequest{Shell: "echo $FROM_CREATE $HOME; echo err >&2; exit 3"})
	if res.ExitCode != 3 || res.Stdout != "c /root\n" || res.Stderr != "err\n" {
		t.Errorf("exec: %+v", res)
	}
	res = execOK(t, m, sb.ID, api.ExecRequest{Cmd: []string{"no-such-command"}})
	if res.ExitCode != 127 || !strings.HasPrefix(res.Stderr, "dsec: ") {
		t.Errorf("missing command: %+v", res)
	}
	res = execOK(t, m, sb.ID, api.ExecRequest{Cmd: []string{"cat"}, Stdin: "via stdin"})
	if res.Stdout != "via stdin" {
		t.Errorf("stdin: %+v", res)
	}
	res = execOK(t, m, sb.ID, api.ExecRequest{Shell: "sleep 10", TimeoutMs: 200})
	if !res.TimedOut || res.Signal != "SIGKILL" {
		t.Errorf("timeout: %+v", res)
	}
	// A user name resolves through the sandbox's own /etc/passwd (the file
	// system goes through the driver's instance).
	res = execOK(t, m, sb.ID, api.ExecRequest{Shell: `echo "$HOME"`, User: "nobody"})
	if res.Stdout != "/\n" {
		t.Errorf("user nobody (home /nonexistent is missing): HOME %q", res.Stdout)
	}
	_, err := m.Exec(ctxT(t), sb.ID, api.ExecRequest{Cmd: []string{"true"}, User: "no-such-user"})
	wantCode(t, "unknown user", err, api.CodeInvalidArgument)
	// Files written through the agent are the process's files.
	fs, err := m.FS(ctxT(t), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	if _, err := fs.WriteFile(ctxT(t), "/tmp/hello", 0o644, strings.NewReader("from the API\n"), 1<<20); err != nil {
		t.Fatal(err)
	}
	if out := shOK(t, m, sb.ID, "cat ../tmp/hello"); out != "from the API\n" {
		t.Errorf("file written through FS, read by a process: %q", out)
	}
}

func TestMockExecStreamTTY(t *testing.T) {
	e := newMockEnv(t)
	m := e.open(t)
	sb := create(t, m, api.CreateSandboxRequest{})
	out, errOut := drivertest.NewScreen(), drivertest.NewScreen()
	res, err := m.ExecStream(ctxT(t), sb.ID, api.ExecRequest{
		Shell: "tty; stty size; echo out; echo err >&2", TTY: true, Cols: 120, Rows: 40,
	}, session.Stream{Stdout: out, Stderr: errOut})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("ExecStream with tty: %+v, %v", res, err)
	}
	got := strings.ReplaceAll(out.String(), "\r\n", "\n")
	if !strings.HasPrefix(got, "/dev/pts/") || !strings.Contains(got, "\n40 120\nout\nerr\n") {
		t.Errorf("terminal output %q: want a /dev/pts name, the size 40 120 and stdout+stderr in order", got)
	}
	if errOut.String() != "" {
		t.Errorf("stderr %q with a tty, want everything on stdout", errOut.String())
	}
	// The default size is 80x24.
	out2 := drivertest.NewScreen()
	if _, err := m.ExecStream(ctxT(t), sb.ID, api.ExecRequest{Shell: "stty size", TTY: true}, session.Stream{Stdout: out2}); err != nil {
		t.Fatal(err)
	}
	if got := out2.String(); got != "24 80\r\n" {
		t.Errorf("default size: %q", got)
	}
	// A resize reaches the program; a resize of an exec without a terminal is
	// ignored (the front end refuses it) and disturbs nothing.
	for _, tty := range []bool{true, false} {
		inR, inW := io.Pipe()
		ctl := make(chan session.Control, 1)
		out := drivertest.NewScreen()
		done := make(chan error, 1)
		req := api.ExecRequest{Shell: "read l; stty size 2>/dev/null || echo no-tty", TTY: tty}
		go func() {
			_, err := m.ExecStream(ctxT(t), sb.ID, req, session.Stream{Stdin: inR, Stdout: out, Control: ctl})
			done <- err
		}()
		ctl <- session.Control{Resize: &api.TermSize{Cols: 132, Rows: 43}}
		time.Sleep(100 * time.Millisecond)
		_, _ = io.WriteString(inW, "go\n")
		inW.Close()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		want := "43 132"
		if !tty {
			want = "no-tty"
		}
		if !strings.Contains(out.String(), want) {
			t.Errorf("tty=%v after a resize: %q, want %q", tty, out.String(), want)
		}
	}
	// Signals go to the terminal's foreground job.
	inR, inW := io.Pipe()
	defer inW.Close()
	ctl := make(chan session.Control, 1)
	out3 := drivertest.NewScreen()
	done := make(chan error, 1)
	go func() {
		_, err := m.ExecStream(ctxT(t), sb.ID, api.ExecRequest{Cmd: []string{"sh", "-i"}, TTY: true},
			session.Stream{Stdin: inR, Stdout: out3, Control: ctl})
		done <- err
	}()
	_, _ = io.WriteString(inW, "sh -c 'echo started-$((1)); exec sleep 100'; echo not-$((0))interrupted\n")
	// The job is the terminal's foreground once its own output (not the
	// echoed input, which has the unexpanded $((1))) is on the screen: the
	// marker comes from the process the signal must stop (a builtin echo
	// before `sleep` would leave a moment in which the shell itself is the
	// foreground and takes the SIGINT).
	if !testwait.Until(15*time.Second, func() bool { return strings.Contains(out3.String(), "started-1") }) {
		t.Fatalf("the job never started: %q", out3.String())
	}
	ctl <- session.Control{Signal: 2} // SIGINT
	_, _ = io.WriteString(inW, "echo alive$((40+2)); exit 0\n")
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("the shell did not finish: %q", out3.String())
	}
	if s := out3.String(); !strings.Contains(s, "alive42") || strings.Contains(s, "not-0interrupted") {
		t.Errorf("SIGINT to the foreground job: %q", s)
	}
}

func TestMockTTYBadInput(t *testing.T) {
	e := newMockEnv(t)
	m := e.open(t, e.driver(t, "", false), e.driver(t, "notty", true))
	sb := create(t, m, api.CreateSandboxRequest{})
	for _, req := range []api.ExecRequest{
		{Cmd: []string{"true"}, TTY: true, Cols: 0, Rows: 24},
		{Cmd: []string{"true"}, TTY: true, Cols: 100000, Rows: 24},
		{Cmd: []string{"true"}, TTY: true, Cols: 80, Rows: -3},
		{Cmd: []string{"true"}, Cols: 80, Rows: 24}, // a size without a tty
	} {
		_, err := m.ExecStream(ctxT(t), sb.ID, req, session.Stream{})
		wantCode(t, "exec stream with a bad terminal", err, api.CodeInvalidArgument)
		_, err = m.StartProcess(ctxT(t), sb.ID, req)
		wantCode(t, "process with a bad terminal", err, api.CodeInvalidArgument)
	}
	// Info reports it as data: the mock backend has a terminal, notty none.
	info, _ := m.Info(ctxT(t))
	if !slices.Contains(info.Capabilities["mock"], api.CapTTY) || slices.Contains(info.Capabilities["notty"], api.CapTTY) {
		t.Errorf("Info capabilities %v: want tty for mock only", info.Capabilities)
	}
	// A backend without the TTY capability refuses terminals with a 4xx code.
	plain := create(t, m, api.CreateSandboxRequest{Backend: "notty"})
	_, err := m.ExecStream(ctxT(t), plain.ID, api.ExecRequest{Cmd: []string{"true"}, TTY: true}, session.Stream{})
	wantCode(t, "tty on a backend without TTY", err, api.CodeInvalidArgument)
	if err != nil && !strings.Contains(err.Error(), "TTY") {
		t.Errorf("the error does not say why: %v", err)
	}
	// Nothing else was disturbed.
	if out := shOK(t, m, plain.ID, "echo fine"); out != "fine\n" {
		t.Errorf("exec after refused terminals: %q", out)
	}
	if procs, _ := m.ListProcesses(ctxT(t), sb.ID); len(procs) != 0 {
		t.Errorf("refused processes were recorded: %+v", procs)
	}
}

func TestMockBackends(t *testing.T) {
	e := newMockEnv(t)
	m := e.open(t, e.driver(t, "", false), e.driver(t, "other", false))
	info, _ := m.Info(ctxT(t))
	if strings.Join(info.Backends, ",") != "mock,other" {
		t.Errorf("Info backends %v", info.Backends)
	}
	// Info reports the host's features, the same probe as dsec doctor.
	var names []string
	for _, f := range info.Host {
		names = append(names, f.Name)
		if !f.Available && f.Degraded == "" {
			t.Errorf("Info host feature %s is missing and says nothing of what is degraded", f.Name)
		}
	}
	for _, want := range []string{"cgroup-v2", "cgroup-v1", "erofs-file-backed", "fuse-resend", "idmapped-mounts",
		"user-namespaces", "nftables", "ksm", "swap", "kvm"} {
		if !slices.Contains(names, want) {
			t.Errorf("Info host features %v lack %s", names, want)
		}
	}
	_, err := m.Create(ctxT(t), api.CreateSandboxRequest{Backend: "no-such-backend"})
	wantCode(t, "unknown backend", err, api.CodeInvalidArgument)
	a := create(t, m, api.CreateSandboxRequest{})
	b := create(t, m, api.CreateSandboxRequest{Backend: "other"})
	if a.Backend != "mock" || b.Backend != "other" {
		t.Fatalf("backends %q and %q", a.Backend, b.Backend)
	}
	shOK(t, m, b.ID, "echo kept > ../tmp/f")
	m.Close()

	// A restarted agent without "other" leaves that sandbox (and its record)
	// alone; one with it routes the record back to its driver.
	m2 := e.open(t, e.driver(t, "", false))
	if _, err := m2.Get(ctxT(t), b.ID); err == nil {
		t.Errorf("an agent without backend other adopted its sandbox")
	}
	if _, err := m2.Get(ctxT(t), a.ID); err != nil {
		t.Errorf("sandbox on mock not re-adopted: %v", err)
	}
	m2.Close()
	m3 := e.open(t, e.driver(t, "", false), e.driver(t, "other", false))
	got, err := m3.Get(ctxT(t), b.ID)
	if err != nil || got.Backend != "other" {
		t.Fatalf("sandbox on other after restart: %+v, %v", got, err)
	}
	if out := shOK(t, m3, b.ID, "cat ../tmp/f"); out != "kept\n" {
		t.Errorf("re-adopted sandbox lost its file: %q", out)
	}
}

// TestMockTTYProcessSurvivesRestart: a background process on a terminal keeps
// running and logging through an agent restart; its terminal output lands in
// its stdout log, all of it by the time its exit is reported. A terminal has one
// output: the stopped agent must no longer copy it (two copies race for the
// terminal's reads, and the exit the new agent reports can come before what the
// old one read reached the log). To see which agent wrote what, the test moves
// the log aside between the two: the old agent's copy, if it still ran, would
// go on writing into the moved file.
func TestMockTTYProcessSurvivesRestart(t *testing.T) {
	e := newMockEnv(t)
	m := e.open(t)
	sb := create(t, m, api.CreateSandboxRequest{})
	p, err := m.StartProcess(ctxT(t), sb.ID, api.ExecRequest{
		Shell: "tty; stty size; sleep 1; i=0; while [ $i -lt 300 ]; do i=$((i+1)); echo line-$i; done; echo after-restart; echo err >&2; exit 5",
		TTY:   true, Cols: 70, Rows: 21})
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(e.dataDir, "logs", sb.ID, p.ID+".stdout")
	testwait.For(t, 5*time.Second, "terminal output before the restart", func() bool {
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b), "21 70")
	})
	m.Close()
	if err := os.Rename(logPath, logPath+".before"); err != nil {
		t.Fatal(err)
	}
	m2 := e.open(t)
	got, err := m2.WaitProcess(ctxT(t), sb.ID, p.ID)
	if err != nil || got.Running || got.Result == nil || got.Result.ExitCode != 5 {
		t.Fatalf("wait after restart: %+v, %v", got, err)
	}
	r, err := m2.ProcessLogs(ctxT(t), sb.ID, p.ID, "stdout", 0)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r)
	r.Close()
	// What came after the restart (300 lines: more than one read of the
	// terminal) is all in the log, in order, when the exit is reported.
	var want strings.Builder
	for i := 1; i <= 300; i++ {
		fmt.Fprintf(&want, "line-%d\n", i)
	}
	want.WriteString("after-restart\nerr\n")
	if log := strings.ReplaceAll(string(b), "\r\n", "\n"); log != want.String() {
		t.Errorf("terminal log after the restart: %d bytes %.80q..., want %d bytes", len(log), log, want.Len())
	}
	before, _ := os.ReadFile(logPath + ".before")
	if log := strings.ReplaceAll(string(before), "\r\n", "\n"); !strings.HasPrefix(log, "/dev/pts/") || !strings.HasSuffix(log, "\n21 70\n") {
		t.Errorf("terminal log before the restart %q (the stopped agent went on copying?)", log)
	}
}

// TestMockTTYLogCapped: a terminal's output goes into the process's stdout log
// under the same cap as a background process's pipes, with the same marker.
func TestMockTTYLogCapped(t *testing.T) {
	e := newMockEnv(t)
	e.maxLog = 1000
	m := e.open(t)
	sb := create(t, m, api.CreateSandboxRequest{})
	p, err := m.StartProcess(ctxT(t), sb.ID, api.ExecRequest{Shell: "head -c 100000 /dev/zero | tr '\\0' x; echo; echo done", TTY: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := m.WaitProcess(ctxT(t), sb.ID, p.ID); err != nil || got.Result == nil || got.Result.ExitCode != 0 {
		t.Fatalf("wait: %+v, %v", got, err)
	}
	r, err := m.ProcessLogs(ctxT(t), sb.ID, p.ID, "stdout", 0)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r)
	r.Close()
	want := strings.Repeat("x", 1000) + "\n[dsec: output truncated after 1000 bytes]\n"
	if string(b) != want {
		t.Errorf("capped terminal log: %d bytes %.60q..., want the first 1000 and the marker", len(b), b)
	}
}

// TestMockRecordOfNewerFormatHeld: a sandbox record written by a later dsec
// (format above datafmt.Record) is left as it is, one that is not a record at
// all is set aside unchanged, and the sandbox either names is neither listed
// nor released: a restart
// with the record readable again adopts the sandbox, still running.
func TestMockRecordOfNewerFormatHeld(t *testing.T) {
	e := newMockEnv(t)
	m := e.open(t)
	sb := create(t, m, api.CreateSandboxRequest{})
	execOK(t, m, sb.ID, api.ExecRequest{Shell: "echo kept > /marker"})
	m.Close()
	recPath := filepath.Join(e.dataDir, "sandboxes", sb.ID+".json")
	orig, err := os.ReadFile(recPath)
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{
		"newer":  bytes.Replace(orig, []byte(`"version":1`), []byte(`"version":99`), 1),
		"broken": append([]byte("{"), orig...),
	} {
		if bytes.Equal(content, orig) {
			t.Fatalf("%s: the record has no version field: %s", name, orig)
		}
		if err := os.WriteFile(recPath, content, 0o600); err != nil {
			t.Fatal(err)
		}
		m2 := e.open(t)
		if _, err := m2.Get(ctxT(t), sb.ID); err == nil {
			t.Errorf("%s: a record this build cannot read was adopted", name)
		}
		m2.Close()
		kept := recPath
		if name == "broken" {
			kept += ".corrupt"
		}
		if b, err := os.ReadFile(kept); err != nil || !bytes.Equal(b, content) {
			t.Fatalf("%s: the record was changed or dropped: %v", name, err)
		}
		if name == "broken" {
			_ = os.Remove(kept)
		}
	}
	if err := os.WriteFile(recPath, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	m3 := e.open(t)
	res := execOK(t, m3, sb.ID, api.ExecRequest{Shell: "cat /marker"})
	if res.Stdout != "kept\n" {
		t.Errorf("the held sandbox lost its state: %q", res.Stdout)
	}
}
