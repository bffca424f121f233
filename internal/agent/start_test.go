package agent_test

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// freePort returns a loopback port nothing listens on (the mock's Dial
// reaches the host's loopback).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startFailure requires a start_failed error that names the sandbox and says
// want, and returns the kept sandbox's ID.
func startFailure(t *testing.T, err error, want ...string) string {
	t.Helper()
	e, ok := api.AsError(err)
	if !ok || e.Code != api.CodeStartFailed || e.Infrastructure || e.Retryable || api.StatusOf(e.Code) != 422 {
		t.Fatalf("error %v, want start_failed (422, not infrastructure, not retryable)", err)
	}
	for _, w := range want {
		if !strings.Contains(e.Message, w) {
			t.Errorf("message %q does not say %q", e.Message, w)
		}
	}
	_, rest, _ := strings.Cut(e.Message, "sandbox ")
	id, _, _ := strings.Cut(rest, ":")
	return id
}

// TestMockStartReadyPort: create answers only once the start command's port
// accepts; without a readiness check it answers at once, before the port does.
func TestMockStartReadyPort(t *testing.T) {
	e := newMockEnv(t)
	m := e.open(t)
	port := freePort(t)
	server := "sleep 0.5; exec python3 -m http.server " + strconv.Itoa(port) + " --bind 127.0.0.1"
	sb := create(t, m, api.CreateSandboxRequest{StartCmd: server, ReadyPort: port, ReadyTimeoutMs: 20_000})
	c, err := m.Dial(ctxT(t), sb.ID, port)
	if err != nil {
		t.Fatalf("dial right after a create with ready_port: %v", err)
	}
	c.Close()
	if sb.Start == nil || sb.Start.State != api.StartReady || sb.Start.ProcessID == "" {
		t.Fatalf("start status %+v, want ready with a process", sb.Start)
	}
	p, err := m.GetProcess(ctxT(t), sb.ID, sb.Start.ProcessID)
	if err != nil || !p.Running || p.Labels[api.LabelStart] != "start_cmd" || !slices.Equal(p.Cmd, []string{"/bin/sh", "-c", server}) {
		t.Errorf("start process %+v (%v)", p, err)
	}
	// The same command without the check: create answers before the port
	// accepts (so the check above is what made it wait).
	port2 := freePort(t)
	sb2 := create(t, m, api.CreateSandboxRequest{StartCmd: "sleep 2; exec python3 -m http.server " + strconv.Itoa(port2) + " --bind 127.0.0.1"})
	if sb2.Start == nil || sb2.Start.State != api.StartStarted {
		t.Errorf("start status %+v, want started", sb2.Start)
	}
	if c, err := m.Dial(ctxT(t), sb2.ID, port2); err == nil {
		c.Close()
		t.Errorf("port %d accepted right after a create without a readiness check", port2)
	}
}

// TestMockStartFails: a start command that exits non-zero before it is ready
// fails the create with start_failed quoting its output; the sandbox is kept
// and says why. A ready_cmd that never passes times out the same way.
func TestMockStartFails(t *testing.T) {
	e := newMockEnv(t)
	m := e.open(t)
	t0 := time.Now()
	_, err := m.Create(ctxT(t), api.CreateSandboxRequest{StartCmd: "echo to-stdout; echo to-stderr >&2; exit 3",
		ReadyCmd: "false", ReadyTimeoutMs: 30_000})
	id := startFailure(t, err, "exit code 3", "before it was ready", "to-stdout", "to-stderr", "kept")
	if d := time.Since(t0); d > 15*time.Second {
		t.Errorf("a start command that exited took %s to fail the create (not the ready timeout)", d)
	}
	sb, gerr := m.Get(ctxT(t), id)
	if gerr != nil {
		t.Fatalf("the sandbox of the failed start is gone: %v", gerr)
	}
	if sb.State != api.StateRunning || sb.Start == nil || sb.Start.State != api.StartFailed || !strings.Contains(sb.Start.Error, "exit code 3") {
		t.Errorf("kept sandbox %+v start %+v", sb, sb.Start)
	}
	if _, err := m.ProcessLogs(ctxT(t), id, sb.Start.ProcessID, "stdout", 0); err != nil {
		t.Errorf("the start process's log: %v", err)
	}

	t0 = time.Now()
	_, err = m.Create(ctxT(t), api.CreateSandboxRequest{StartCmd: "echo serving; exec sleep 60",
		ReadyCmd: "echo not-yet >&2; exit 1", ReadyTimeoutMs: 700})
	id2 := startFailure(t, err, "was not ready within 700ms", "ready_cmd exit code 1", "not-yet", "serving")
	if d := time.Since(t0); d < 700*time.Millisecond {
		t.Errorf("timed out after %s, before the 700ms ready timeout", d)
	}
	sbs, _ := m.List(ctxT(t))
	if len(sbs) != 2 || id2 == id {
		t.Errorf("%d sandboxes listed, want both failed starts kept", len(sbs))
	}

	// A ready port nothing opens times out too; a command that exits 0 (a
	// daemon that went to the background) does not fail by itself.
	_, err = m.Create(ctxT(t), api.CreateSandboxRequest{StartCmd: "true", ReadyPort: freePort(t), ReadyTimeoutMs: 500})
	startFailure(t, err, "was not ready within 500ms", "ready_port")
}

// TestMockStartRequestID: a retry of a create whose start failed gets the same
// failure and the same kept sandbox, not a second one.
func TestMockStartRequestID(t *testing.T) {
	e := newMockEnv(t)
	m := e.open(t)
	req := api.CreateSandboxRequest{RequestID: "r1", StartCmd: "exit 7", ReadyCmd: "false"}
	_, err := m.Create(ctxT(t), req)
	id := startFailure(t, err, "exit code 7")
	_, err = m.Create(ctxT(t), req)
	if id2 := startFailure(t, err, "exit code 7"); id2 != id {
		t.Errorf("retry named sandbox %q, the first %q", id2, id)
	}
	if sbs, _ := m.List(ctxT(t)); len(sbs) != 1 {
		t.Errorf("%d sandboxes after a retried failed start, want 1", len(sbs))
	}
	// Deleted, the request ID is free again.
	if err := m.Delete(ctxT(t), id); err != nil {
		t.Fatal(err)
	}
	req.StartCmd, req.ReadyCmd = "exec sleep 30", "true"
	if sb := create(t, m, req); sb.Start.State != api.StartReady {
		t.Errorf("start %+v", sb.Start)
	}
}

// TestMockStartEntrypoint: entrypoint: true runs the image's Entrypoint and
// Cmd; an image with neither is invalid_argument and creates nothing.
func TestMockStartEntrypoint(t *testing.T) {
	e := newMockEnv(t)
	dir := filepath.Join(e.store.Dir, "withep")
	if err := os.MkdirAll(filepath.Join(dir, "rootfs", "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rootfs", "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	manifest := `{"name":"withep","lower":["rootfs"],"config":{"entrypoint":["/bin/sh","-c"],"cmd":["echo $0; exec sleep 30","ep-arg"]}}`
	if err := os.WriteFile(filepath.Join(dir, "image.json"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	m := e.open(t)
	sb := create(t, m, api.CreateSandboxRequest{Image: "withep", Entrypoint: true, ReadyCmd: "true"})
	want := []string{"/bin/sh", "-c", "echo $0; exec sleep 30", "ep-arg"}
	p, err := m.GetProcess(ctxT(t), sb.ID, sb.Start.ProcessID)
	if err != nil || !slices.Equal(p.Cmd, want) || p.Labels[api.LabelStart] != "entrypoint" || sb.Start.State != api.StartReady {
		t.Errorf("entrypoint process %+v (%v), start %+v; want cmd %q", p, err, sb.Start, want)
	}
	_, err = m.Create(ctxT(t), api.CreateSandboxRequest{Entrypoint: true})
	wantCode(t, "entrypoint on an image without one", err, api.CodeInvalidArgument)
	if err != nil && !strings.Contains(err.Error(), "neither an Entrypoint nor a Cmd") {
		t.Errorf("message: %v", err)
	}
	if sbs, _ := m.List(ctxT(t)); len(sbs) != 1 {
		t.Errorf("%d sandboxes, want only the first", len(sbs))
	}
}

// TestMockStartRefused: malformed start fields through the validating chain
// are invalid_argument naming the field, and nothing is created; a batch
// whose member's start fails keeps that member only.
func TestMockStartRefused(t *testing.T) {
	e := newMockEnv(t)
	m := e.open(t)
	svc := validated(m)
	for field, req := range map[string]api.CreateSandboxRequest{
		"start_cmd":        {StartCmd: " "},
		"ready_port":       {StartCmd: "sleep 9", ReadyPort: 70000},
		"ready_timeout_ms": {StartCmd: "sleep 9", ReadyPort: 80, ReadyTimeoutMs: -5},
		"entrypoint":       {StartCmd: "sleep 9", Entrypoint: true},
	} {
		_, err := svc.Create(ctxT(t), req)
		if !errdefs.Is(err, api.CodeInvalidArgument) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v, want invalid_argument naming it", field, err)
		}
	}
	_, err := svc.Create(ctxT(t), api.CreateSandboxRequest{StartCmd: "sleep 9", ReadyPort: 80, ReadyTimeoutMs: api.MaxReadyTimeoutMs + 1})
	wantCode(t, "ready timeout too large", err, api.CodeInvalidArgument)
	if sbs, _ := m.List(ctxT(t)); len(sbs) != 0 {
		t.Fatalf("%d sandboxes created by refused requests", len(sbs))
	}
	_, err = svc.CreateBatch(ctxT(t), []api.CreateSandboxRequest{{StartCmd: "exec sleep 30", ReadyCmd: "true"},
		{StartCmd: "exit 4", ReadyCmd: "false"}})
	id := startFailure(t, err, "exit code 4")
	if !strings.Contains(err.Error(), "sandboxes[1] failed, the others deleted") {
		t.Errorf("batch error %v", err)
	}
	sbs, _ := m.List(ctxT(t))
	if len(sbs) != 1 || sbs[0].ID != id {
		t.Errorf("after the batch: %+v, want only the failed member %s", sbs, id)
	}
}

// TestMockStartSandboxDeleted: a create waiting for readiness ends at once,
// as start_failed, when its sandbox is deleted meanwhile.
func TestMockStartSandboxDeleted(t *testing.T) {
	e := newMockEnv(t)
	m := e.open(t)
	errc := make(chan error, 1)
	t0 := time.Now()
	go func() {
		_, err := m.Create(ctxT(t), api.CreateSandboxRequest{StartCmd: "exec sleep 60", ReadyCmd: "false", ReadyTimeoutMs: 60_000})
		errc <- err
	}()
	var id string
	testwait.For(t, 20*time.Second, "a sandbox waiting for its start command", func() bool {
		sbs, _ := m.List(ctxT(t))
		if len(sbs) == 1 && sbs[0].Start != nil && sbs[0].Start.State == api.StartStarting {
			id = sbs[0].ID
		}
		return id != ""
	})
	if err := m.Delete(ctxT(t), id); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if got := startFailure(t, err, "deleted before its start_cmd was ready"); got != id {
			t.Errorf("error names %q, the sandbox was %s", got, id)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("create still waiting 20s after its sandbox was deleted")
	}
	if d := time.Since(t0); d > 30*time.Second {
		t.Errorf("took %s", d)
	}
}
