package agent_test

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/pkg/api"
)

// procLog reads a background process's stdout log.
func procLog(t *testing.T, m *agent.Manager, id, procID string) string {
	t.Helper()
	rc, err := m.ProcessLogs(ctxT(t), id, procID, "stdout", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return string(b)
}

// A background process started with OpenStdin takes input, an end of input
// and (on a terminal) resizes from any caller, and keeps its labels.
func TestMockProcessInput(t *testing.T) {
	e := newMockEnv(t)
	m := e.open(t)
	sb := create(t, m, api.CreateSandboxRequest{})
	p, err := m.StartProcess(ctxT(t), sb.ID, api.ExecRequest{Cmd: []string{"cat"}, OpenStdin: true,
		Labels: map[string]string{"tag": "reader"}})
	if err != nil {
		t.Fatal(err)
	}
	list, err := m.ListProcesses(ctxT(t), sb.ID)
	if err != nil || len(list) != 1 || list[0].Labels["tag"] != "reader" || !list[0].OpenStdin || !list[0].Running {
		t.Fatalf("listed %+v, %v", list, err)
	}
	if err := m.SendProcessInput(ctxT(t), sb.ID, p.ID, api.ProcessInput{Data: []byte("hello\n")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the input echoed", func() bool { return procLog(t, m, sb.ID, p.ID) == "hello\n" })
	if err := m.SendProcessInput(ctxT(t), sb.ID, p.ID, api.ProcessInput{Data: []byte("bye\n"), EOF: true}); err != nil {
		t.Fatal(err)
	}
	got, err := m.WaitProcess(ctxT(t), sb.ID, p.ID)
	if err != nil || got.Running || got.Result.ExitCode != 0 {
		t.Fatalf("after EOF: %+v, %v", got, err)
	}
	if out := procLog(t, m, sb.ID, p.ID); out != "hello\nbye\n" {
		t.Errorf("output %q", out)
	}
	err = m.SendProcessInput(ctxT(t), sb.ID, p.ID, api.ProcessInput{Data: []byte("late")})
	wantCode(t, "input to an ended process", err, api.CodeConflict)

	closed, err := m.StartProcess(ctxT(t), sb.ID, api.ExecRequest{Shell: "sleep 30"})
	if err != nil {
		t.Fatal(err)
	}
	err = m.SendProcessInput(ctxT(t), sb.ID, closed.ID, api.ProcessInput{Data: []byte("x")})
	wantCode(t, "input without open_stdin", err, api.CodeInvalidArgument)
	err = m.SendProcessInput(ctxT(t), sb.ID, closed.ID, api.ProcessInput{Resize: &api.TermSize{Cols: 90, Rows: 20}})
	wantCode(t, "resize without a terminal", err, api.CodeInvalidArgument)
	err = m.SendProcessInput(ctxT(t), sb.ID, "p999", api.ProcessInput{Data: []byte("x")})
	wantCode(t, "unknown process", err, api.CodeNotFound)
	if err := m.KillProcess(ctxT(t), sb.ID, closed.ID, 9); err != nil {
		t.Fatal(err)
	}

	tty, err := m.StartProcess(ctxT(t), sb.ID, api.ExecRequest{Shell: "stty size; read x; stty size", TTY: true, OpenStdin: true})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the first size", func() bool { return strings.Contains(procLog(t, m, sb.ID, tty.ID), "24 80") })
	err = m.SendProcessInput(ctxT(t), sb.ID, tty.ID, api.ProcessInput{Resize: &api.TermSize{Cols: 0, Rows: 5}})
	wantCode(t, "a zero size", err, api.CodeInvalidArgument)
	if err := m.SendProcessInput(ctxT(t), sb.ID, tty.ID, api.ProcessInput{Resize: &api.TermSize{Cols: 100, Rows: 30}}); err != nil {
		t.Fatal(err)
	}
	if err := m.SendProcessInput(ctxT(t), sb.ID, tty.ID, api.ProcessInput{Data: []byte("\n")}); err != nil {
		t.Fatal(err)
	}
	if got, err := m.WaitProcess(ctxT(t), sb.ID, tty.ID); err != nil || got.Running || got.Result.ExitCode != 0 {
		t.Fatalf("terminal process: %+v, %v", got, err)
	}
	if out := procLog(t, m, sb.ID, tty.ID); !strings.Contains(out, "30 100") {
		t.Errorf("terminal output after the resize %q", out)
	}
}
