package v1_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/backend/driver"
	v1 "github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// TestRun: one POST /v1/sandboxes:run creates a sandbox, streams the
// command's I/O both ways, and with remove has deleted the sandbox when the
// exit event arrives; without remove the sandbox stays and is the one the
// sandbox event named.
func TestRun(t *testing.T) {
	e := newEnv(t, v1.Options{})
	cl := client.New(e.srv.URL, token)
	ctx := context.Background()

	var out bytes.Buffer
	s, err := cl.StartRun(ctx, api.RunRequest{
		Sandbox: api.CreateSandboxRequest{Labels: map[string]string{"k": "v"}},
		Exec:    api.ExecRequest{Cmd: []string{"cat"}, Stdin: "pre:"},
		Remove:  true,
	}, client.StreamOptions{Stdin: strings.NewReader("typed"), Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if sb := s.Sandbox(); !strings.HasPrefix(sb.ID, "sb-") || sb.Labels["k"] != "v" {
		t.Fatalf("sandbox event %+v", sb)
	}
	res, err := s.Wait()
	if err != nil || res.ExitCode != 0 || out.String() != "pre:typed" {
		t.Fatalf("run: %+v %v, stdout %q", res, err, out.String())
	}
	if err := s.RemoveError(); err != nil {
		t.Fatal(err)
	}
	if n := e.count(); n != 0 {
		t.Fatalf("%d sandboxes after a run with remove", n)
	}

	// OnSandbox comes before any output (dsec run prints the kept ID there).
	var order []string
	s, err = cl.StartRun(ctx, api.RunRequest{Exec: api.ExecRequest{Shell: "echo hi; exit 3"}}, client.StreamOptions{
		Stdout:    writerFunc(func(p []byte) { order = append(order, "output") }),
		OnSandbox: func(sb api.Sandbox) { order = append(order, "sandbox "+sb.ID) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.Wait(); err != nil || res.ExitCode != 3 {
		t.Fatalf("run: %+v %v", res, err)
	}
	if len(order) < 2 || order[0] != "sandbox "+s.Sandbox().ID || order[1] != "output" {
		t.Fatalf("callbacks in the order %q, want the sandbox first", order)
	}
	if _, err := cl.Get(ctx, s.Sandbox().ID); err != nil {
		t.Fatalf("the sandbox of a run without remove: %v", err)
	}
}

// TestRunClientLeaves: a client that goes away mid-command (its process
// killed) still gets its sandbox deleted with remove.
func TestRunClientLeaves(t *testing.T) {
	e := newEnv(t, v1.Options{})
	cl := client.New(e.srv.URL, token)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{})
	s, err := cl.StartRun(ctx, api.RunRequest{Exec: api.ExecRequest{Cmd: []string{"sleep", "60"}}, Remove: true},
		client.StreamOptions{OnStart: func(int) { close(started) }})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the command did not start")
	}
	if n := e.count(); n != 1 {
		t.Fatalf("%d sandboxes while the run's command runs", n)
	}
	cancel()
	if _, err := s.Wait(); err == nil {
		t.Fatal("a cancelled run ended without an error")
	}
	testwait.For(t, 30*time.Second, "the sandbox of a run whose client left is deleted", func() bool { return e.count() == 0 })
}

// TestRunErrors: a run refused before its sandbox exists is an ordinary
// error response naming the mistake, and leaves no sandbox; an exec that
// fails once the sandbox exists is an error event, and remove still
// deletes the sandbox.
func TestRunErrors(t *testing.T) {
	e := newEnv(t, v1.Options{})
	for _, c := range []struct {
		body, want string
		hdr        []string
	}{
		{"", "empty", nil},
		{`{"sandbox":{},"exec":{"cmd":["true"]},"x":1}` + "\n", "x", nil},
		{`{"sandbox":{},"exec":{}}` + "\n", "exec: exactly one of cmd and shell", nil},
		{`{"sandbox":{"wait":false},"exec":{"cmd":["true"]}}` + "\n", "a run waits for its sandbox", nil},
		{`{"sandbox":{"memory":"12q"},"exec":{"cmd":["true"]},"remove":true}` + "\n", "memory", nil},
		{`{"exec":{"cmd":["true"]}}` + "\n", "not a trajectory step", []string{api.TrajectoryHeader, "t1", api.StepHeader, "1"}},
	} {
		resp, b := e.do("POST", "/v1/sandboxes:run", strings.NewReader(c.body), c.hdr...)
		ae := wantError(t, resp, b, http.StatusBadRequest, api.CodeInvalidArgument)
		if !strings.Contains(ae.Message, c.want) {
			t.Errorf("%q: %q, want it to name %q", c.body, ae.Message, c.want)
		}
	}
	resp, b := e.do("POST", "/v1/sandboxes:run", strings.NewReader(`{"sandbox":{"image":"no-such-image"},"exec":{"cmd":["true"]},"remove":true}`+"\n"))
	wantError(t, resp, b, http.StatusNotFound, api.CodeNotFound)
	if n := e.count(); n != 0 {
		t.Fatalf("refused runs left %d sandboxes", n)
	}

	// The sandbox exists, the exec fails: an error event, after the sandbox's.
	resp, b = e.do("POST", "/v1/sandboxes:run", strings.NewReader(`{"exec":{"cmd":["true"],"user":"no-such-user"},"remove":true}`+"\n"))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("run: %d %s", resp.StatusCode, b)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"type":"sandbox"`) || !strings.Contains(lines[1], `"type":"error"`) {
		t.Fatalf("events %s", b)
	}
	if n := e.count(); n != 0 {
		t.Fatalf("a failed exec with remove left %d sandboxes", n)
	}
}

// TestRunClientLeavesDuringCreate: a client that goes away while its
// sandbox is still being made gets nothing left behind with remove.
func TestRunClientLeavesDuringCreate(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e := newEnv(t, v1.Options{}, func(d driver.Driver) driver.Driver {
		return agenttest.FailStart(d, func(driver.Spec) error {
			once.Do(func() { close(entered); <-release })
			return nil
		})
	})
	cl := client.New(e.srv.URL, token)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cl.StartRun(ctx, api.RunRequest{Exec: api.ExecRequest{Cmd: []string{"true"}}, Remove: true}, client.StreamOptions{})
		done <- err
	}()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the create did not start")
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a run cancelled during its create returned a stream")
	}
	close(release)
	testwait.For(t, 30*time.Second, "no sandbox of a run whose client left during the create", func() bool { return e.count() == 0 })
}

type writerFunc func(p []byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }
