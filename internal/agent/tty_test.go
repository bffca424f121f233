package agent_test

import (
	"io"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/pkg/api"
)

// TestTTYProcessSurvivesRestart is TestMockTTYProcessSurvivesRestart on the
// container driver: the terminal lives in the sandbox's devpts, its master
// with the init, so a restarted agent picks the process up again.
func TestTTYProcessSurvivesRestart(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, nil)
	sb := create(t, m, api.CreateSandboxRequest{Image: "busybox"})
	p, err := m.StartProcess(ctxT(t), sb.ID, api.ExecRequest{
		Shell: "tty; stty size; sleep 1; echo after-restart; echo err >&2; exit 5", TTY: true, Cols: 70, Rows: 21})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	m2 := e.open(t, nil)
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
	log := strings.ReplaceAll(string(b), "\r\n", "\n")
	if !strings.HasPrefix(log, "/dev/pts/0\n") || !strings.Contains(log, "\n21 70\n") || !strings.Contains(log, "after-restart\nerr\n") {
		t.Errorf("terminal log %q", log)
	}
}
