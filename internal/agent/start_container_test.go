package agent_test

import (
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// TestStartContainer: start commands in real container sandboxes (root, the
// default image). A web server with ready_port 8080: create answers only when
// the port accepts, so a connect from inside right after it succeeds the first
// time. A start command that exits 1 fails the create with its output and the
// sandbox is kept (listed, failed); a ready_cmd that never passes times out.
func TestStartContainer(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, nil)
	svc := validated(m)
	const connect = `python3 -c "import socket; socket.create_connection(('127.0.0.1', 8080), timeout=2).close()"`

	t0 := time.Now()
	sb, err := svc.Create(ctxT(t), api.CreateSandboxRequest{Backend: api.BackendContainer,
		StartCmd: "python3 -m http.server 8080", ReadyPort: 8080, ReadyTimeoutMs: 30_000})
	if err != nil {
		t.Fatalf("create with ready_port: %v", err)
	}
	took := time.Since(t0)
	if res := execOK(t, m, sb.ID, api.ExecRequest{Shell: connect}); res.ExitCode != 0 {
		t.Fatalf("connect right after create: %+v", res)
	}
	if sb.Start == nil || sb.Start.State != api.StartReady {
		t.Errorf("start %+v, want ready", sb.Start)
	}
	t.Logf("create with python3 -m http.server and ready_port: %s", took)

	// Without the check the same connect, as early, is refused: the check is
	// what made create wait.
	sb2, err := svc.Create(ctxT(t), api.CreateSandboxRequest{Backend: api.BackendContainer,
		StartCmd: "sleep 1; exec python3 -m http.server 8080"})
	if err != nil {
		t.Fatal(err)
	}
	if res := execOK(t, m, sb2.ID, api.ExecRequest{Shell: connect}); res.ExitCode == 0 {
		t.Errorf("port 8080 accepted right after a create without a readiness check")
	}

	_, err = svc.Create(ctxT(t), api.CreateSandboxRequest{Backend: api.BackendContainer,
		StartCmd: "echo starting up; echo no config found >&2; exit 1", ReadyPort: 8080, ReadyTimeoutMs: 30_000})
	id := startFailure(t, err, "exit code 1", "before it was ready", "starting up", "no config found")
	kept, err := m.Get(ctxT(t), id)
	if err != nil {
		t.Fatalf("the failed start's sandbox is gone: %v", err)
	}
	if kept.State != api.StateRunning || kept.Start == nil || kept.Start.State != api.StartFailed {
		t.Errorf("kept sandbox state %q start %+v", kept.State, kept.Start)
	}
	if res := execOK(t, m, id, api.ExecRequest{Shell: "echo inspect"}); res.Stdout != "inspect\n" {
		t.Errorf("exec in the kept sandbox: %+v", res)
	}

	t0 = time.Now()
	_, err = svc.Create(ctxT(t), api.CreateSandboxRequest{Backend: api.BackendContainer,
		StartCmd: "exec sleep 600", ReadyCmd: "test -e /tmp/never", ReadyTimeoutMs: 1500})
	startFailure(t, err, "was not ready within 1.5s", "ready_cmd exit code 1")
	if d := time.Since(t0); d < 1500*time.Millisecond {
		t.Errorf("the ready timeout ended after %s", d)
	}
	all, _ := m.List(ctxT(t))
	failed := 0
	for _, s := range all {
		if s.Start != nil && s.Start.State == api.StartFailed {
			failed++
			if !strings.Contains(s.Start.Error, "ready") {
				t.Errorf("%s: start error %q", s.ID, s.Start.Error)
			}
		}
	}
	if len(all) != 4 || failed != 2 {
		t.Errorf("%d sandboxes, %d failed starts; want 4 and 2", len(all), failed)
	}
}
