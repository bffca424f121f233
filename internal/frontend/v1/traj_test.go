package v1_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	v1 "github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/internal/frontend/v1/openapitest"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/trajectory"
	"github.com/dsec-dev/dsec/pkg/api"
)

func trajEnv(t *testing.T) (*env, *trajectory.Mem) {
	store := trajectory.NewMem()
	return newTrajEnv(t, store), store
}

// newTrajEnv serves a node wrapped in the trajectory decorator on store.
func newTrajEnv(t *testing.T, store trajectory.Store) *env {
	t.Helper()
	node := agenttest.NewNode(t)
	svc := session.Chain(trajectory.Wrap(node, store, trajectory.Options{TempDir: t.TempDir()}), session.Validating(nil))
	srv := httptest.NewServer(openapitest.Wrap(t, v1.New(svc, v1.Options{Token: token, Steps: true}).Handler()))
	t.Cleanup(srv.Close)
	return &env{t: t, node: node, srv: srv}
}

func stepHdr(traj, step string) []string {
	return []string{api.TrajectoryHeader, traj, api.StepHeader, step}
}

func TestTrajectoryExecReplay(t *testing.T) {
	e, store := trajEnv(t)
	sb := e.create()
	path := "/v1/sandboxes/" + sb.ID + "/exec"
	resp, b := e.do("POST", path, strings.NewReader(`{"cmd":["echo","one"]}`), stepHdr("t1", "1")...)
	var r api.ExecResult
	mustJSON(t, b, &r)
	if resp.StatusCode != 200 || r.Stdout != "one\n" || r.Replayed || resp.Header.Get(api.ReplayedHeader) != "" {
		t.Fatalf("live: %d %s", resp.StatusCode, b)
	}
	// Same request with the defaults spelled out: replayed.
	resp, b = e.do("POST", path, strings.NewReader(`{"cmd":["echo","one"],"timeout_ms":60000,"user":"root"}`), stepHdr("t1", "1")...)
	r = api.ExecResult{}
	mustJSON(t, b, &r)
	if resp.StatusCode != 200 || r.Stdout != "one\n" || !r.Replayed || resp.Header.Get(api.ReplayedHeader) != "true" {
		t.Fatalf("replay: %d %s", resp.StatusCode, b)
	}
	resp, b = e.do("POST", path, strings.NewReader(`{"cmd":["echo","two"]}`), stepHdr("t1", "1")...)
	er := wantError(t, resp, b, 409, api.CodeTrajectoryDiverged)
	if !strings.Contains(er.Message, "step 1") || strings.Count(er.Message, "sha256:") != 2 {
		t.Fatalf("diverged message: %s", er.Message)
	}
	resp, b = e.do("POST", path, strings.NewReader(`{"cmd":["echo","x"]}`), stepHdr("t1", "3")...)
	wantError(t, resp, b, 400, api.CodeInvalidArgument)
	resp, b = e.do("POST", path, strings.NewReader(`{"cmd":["echo","x"]}`), stepHdr("t1", "0")...)
	wantError(t, resp, b, 400, api.CodeInvalidArgument)
	resp, b = e.do("POST", path, strings.NewReader(`{"cmd":["echo","x"]}`), api.TrajectoryHeader, "t1")
	wantError(t, resp, b, 400, api.CodeInvalidArgument)

	// A step interrupted by a restart is of unknown outcome; the next one runs.
	if _, err := store.Begin(t.Context(), trajectory.BeginRequest{Trajectory: "t1", N: 2, Op: "exec", Fingerprint: "x", SandboxID: sb.ID}); err != nil {
		t.Fatal(err)
	}
	store.Restart()
	resp, b = e.do("POST", path, strings.NewReader(`{"cmd":["echo","x"]}`), stepHdr("t1", "2")...)
	wantError(t, resp, b, 409, api.CodeTrajectoryDiverged)
	_, steps, _ := store.Get(t.Context(), "t1")
	if steps[1].State != api.StepUnknown {
		t.Fatalf("state %s", steps[1].State)
	}
	resp, b = e.do("POST", path, strings.NewReader(`{"cmd":["echo","three"]}`), stepHdr("t1", "3")...)
	if resp.StatusCode != 200 || !strings.Contains(string(b), "three") {
		t.Fatalf("step 3: %d %s", resp.StatusCode, b)
	}

	// Read the log back.
	resp, b = e.do("GET", "/v1/trajectories/t1", nil)
	var tr api.Trajectory
	mustJSON(t, b, &tr)
	if resp.StatusCode != 200 || len(tr.Steps) != 3 || tr.SandboxID != sb.ID || tr.Steps[0].State != "finished" ||
		!strings.Contains(string(tr.Steps[0].Result), `"one\n"`) {
		t.Fatalf("get: %d %s", resp.StatusCode, b)
	}
	resp, b = e.do("GET", "/v1/trajectories/t1/export", nil)
	if resp.StatusCode != 200 || strings.Count(string(b), "\n") != 3 {
		t.Fatalf("export: %d %s", resp.StatusCode, b)
	}
	resp, b = e.do("GET", "/v1/trajectories", nil)
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"t1"`) {
		t.Fatalf("list: %s", b)
	}
	if resp, _ = e.do("DELETE", "/v1/trajectories/t1", nil); resp.StatusCode != 204 {
		t.Fatalf("delete: %d", resp.StatusCode)
	}
	resp, b = e.do("GET", "/v1/trajectories/t1", nil)
	wantError(t, resp, b, 404, api.CodeNotFound)
}

func TestTrajectoryFilesStreamAndLost(t *testing.T) {
	e, _ := trajEnv(t)
	sb := e.create()
	base := "/v1/sandboxes/" + sb.ID
	resp, b := e.do("PUT", base+"/files?path=/f.txt", strings.NewReader("hello"), stepHdr("f", "1")...)
	if resp.StatusCode != 200 {
		t.Fatalf("write: %d %s", resp.StatusCode, b)
	}
	resp, b = e.do("PUT", base+"/files?path=/f.txt&mode=0644", strings.NewReader("hello"), stepHdr("f", "1")...)
	if resp.StatusCode != 200 || resp.Header.Get(api.ReplayedHeader) != "true" {
		t.Fatalf("write replay: %d %s", resp.StatusCode, b)
	}
	resp, b = e.do("PUT", base+"/files?path=/f.txt", strings.NewReader("HELLO"), stepHdr("f", "1")...)
	wantError(t, resp, b, 409, api.CodeTrajectoryDiverged)
	resp, b = e.do("GET", base+"/files?path=/f.txt", nil, stepHdr("f", "2")...)
	if resp.StatusCode != 200 || string(b) != "hello" {
		t.Fatalf("read: %d %s", resp.StatusCode, b)
	}
	e.do("PUT", base+"/files?path=/f.txt", strings.NewReader("changed"))
	resp, b = e.do("GET", base+"/files?path=/f.txt", nil, stepHdr("f", "2")...)
	if resp.StatusCode != 200 || string(b) != "hello" || resp.Header.Get(api.ReplayedHeader) != "true" || resp.Header.Get("Content-Length") != "5" {
		t.Fatalf("read replay: %d %q %v", resp.StatusCode, b, resp.Header)
	}
	resp, b = e.do("POST", base+"/files/mkdir", strings.NewReader(`{"path":"/d","parents":true}`), stepHdr("f", "3")...)
	if resp.StatusCode != 204 {
		t.Fatalf("mkdir: %d %s", resp.StatusCode, b)
	}
	// A file that is not there is a result too: logged and replayed.
	resp, b = e.do("DELETE", base+"/files?path=/nope", nil, stepHdr("f", "4")...)
	wantError(t, resp, b, 404, api.CodeNotFound)
	resp, b = e.do("DELETE", base+"/files?path=/nope", nil, stepHdr("f", "4")...)
	wantError(t, resp, b, 404, api.CodeNotFound)
	if resp.Header.Get(api.ReplayedHeader) != "true" {
		t.Fatal("error result not replayed")
	}

	stream := func(step string) (*http.Response, []byte) {
		return e.do("POST", base+"/exec/stream", strings.NewReader(`{"cmd":["echo","streamed"]}`+"\n"+`{"eof":true}`+"\n"), stepHdr("f", step)...)
	}
	resp, b = stream("5")
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"exit"`) {
		t.Fatalf("stream: %d %s", resp.StatusCode, b)
	}
	resp, b2 := stream("5")
	if resp.Header.Get(api.ReplayedHeader) != "true" || !strings.Contains(string(b2), `"replayed":true`) ||
		!strings.Contains(string(b2), `"stdout"`) {
		t.Fatalf("stream replay: %s", b2)
	}

	// Another trajectory may not use a sandbox bound... it may; but a step aimed at
	// another sandbox than its trajectory's is a conflict.
	sb2 := e.create()
	resp, b = e.do("POST", "/v1/sandboxes/"+sb2.ID+"/exec", strings.NewReader(`{"cmd":["echo"]}`), stepHdr("f", "6")...)
	wantError(t, resp, b, 409, api.CodeConflict)

	// The sandbox goes away: replays still answer, live steps say it is lost.
	e.do("DELETE", base, nil)
	resp, b = e.do("GET", base+"/files?path=/f.txt", nil, stepHdr("f", "2")...)
	if resp.StatusCode != 200 || string(b) != "hello" {
		t.Fatalf("replay after loss: %d %s", resp.StatusCode, b)
	}
	resp, b = e.do("POST", base+"/exec", strings.NewReader(`{"cmd":["echo"]}`), stepHdr("f", "6")...)
	wantError(t, resp, b, 410, api.CodeTrajectorySandboxLost)
	resp, b = e.do("POST", "/v1/trajectories/f/rebuild", nil)
	var rb api.RebuildResponse
	mustJSON(t, b, &rb)
	if resp.StatusCode != 200 || rb.SandboxID == "" || rb.SandboxID == sb.ID || rb.Reexecuted != 4 {
		t.Fatalf("rebuild: %d %s", resp.StatusCode, b)
	}
	for _, st := range rb.Steps {
		if st.Action == "reexecuted" && !st.Matched {
			t.Errorf("step %d did not match: %+v", st.Step, st)
		}
	}
	resp, b = e.do("POST", "/v1/sandboxes/"+rb.SandboxID+"/exec", strings.NewReader(`{"cmd":["echo","after"]}`), stepHdr("f", "6")...)
	if resp.StatusCode != 200 {
		t.Fatalf("step after rebuild: %d %s", resp.StatusCode, b)
	}
	var tr api.Trajectory
	_, b = e.do("GET", "/v1/trajectories/f", nil)
	_ = json.Unmarshal(b, &tr)
	if tr.SandboxID != rb.SandboxID || tr.Rebuilds != 1 || len(tr.Sandboxes) != 2 {
		t.Fatalf("after rebuild: %s", b)
	}
}

// TestTrajectoryPebbleStore runs a step, its replay and the read API on the
// node's default store.
func TestTrajectoryPebbleStore(t *testing.T) {
	store, err := trajectory.OpenPebble(filepath.Join(t.TempDir(), "trajectories"), trajectory.PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	e := newTrajEnv(t, store)
	sb := e.create()
	path := "/v1/sandboxes/" + sb.ID + "/exec"
	for i, want := range []bool{false, true} {
		resp, b := e.do("POST", path, strings.NewReader(`{"cmd":["echo","one"]}`), stepHdr("p1", "1")...)
		var r api.ExecResult
		mustJSON(t, b, &r)
		if resp.StatusCode != 200 || r.Stdout != "one\n" || r.Replayed != want {
			t.Fatalf("exec %d: %d %s", i, resp.StatusCode, b)
		}
	}
	resp, b := e.do("GET", "/v1/trajectories/p1", nil)
	var tr api.Trajectory
	mustJSON(t, b, &tr)
	if resp.StatusCode != 200 || len(tr.Steps) != 1 || tr.Steps[0].State != api.StepFinished ||
		!strings.Contains(string(tr.Steps[0].Result), `"one\n"`) {
		t.Fatalf("get: %d %s", resp.StatusCode, b)
	}
}

// fnCalls runs FnCalls, counting them.
type fnCalls struct{ n int }

// fnNode is a node with fnCalls' FnCall (the mock driver runs no FnCalls).
type fnNode struct {
	session.Service
	fc *fnCalls
}

func (n fnNode) FnCall(ctx context.Context, req api.FnCallRequest) (api.FnCallResult, error) {
	return n.fc.FnCall(ctx, req)
}

func (f *fnCalls) FnCall(_ context.Context, req api.FnCallRequest) (api.FnCallResult, error) {
	f.n++
	return api.FnCallResult{Verdict: api.VerdictAccepted, Tests: []api.FnCallTestResult{{Verdict: api.VerdictAccepted, Stdout: fmt.Sprint(f.n)}}}, nil
}

// TestTrajectoryProxyAndFnCall: a tagged proxy request and a tagged FnCall are
// steps, replayed with the header and without running again.
func TestTrajectoryProxyAndFnCall(t *testing.T) {
	node := agenttest.NewNode(t)
	fc := &fnCalls{}
	svc := session.Chain(trajectory.Wrap(fnNode{node, fc}, trajectory.NewMem(), trajectory.Options{TempDir: t.TempDir()}), session.Validating(nil))
	srv := httptest.NewServer(openapitest.Wrap(t, v1.New(svc, v1.Options{Token: token, Steps: true}).Handler()))
	t.Cleanup(srv.Close)
	e := &env{t: t, node: node, srv: srv}
	hits := 0
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-App", "yes")
		w.Header().Set(v1.ErrorHeader, "forged")
		w.WriteHeader(201)
		fmt.Fprintf(w, "%s %s %s auth=%q traj=%q #%d", r.Method, r.URL.RequestURI(), b, r.Header.Get("Authorization"), r.Header.Get(api.TrajectoryHeader), hits)
	}))
	t.Cleanup(backend.Close)
	sb := e.create()
	path := "/v1/sandboxes/" + sb.ID + "/http/" + backendPort(t, backend) + "/a/b?q=1"
	want := `POST /a/b?q=1 ping auth="" traj="" #1`
	for i, replay := range []bool{false, true} {
		resp, b := e.do("POST", path, strings.NewReader("ping"), stepHdr("px", "1")...)
		if resp.StatusCode != 201 || string(b) != want || resp.Header.Get("X-App") != "yes" || resp.Header.Get(v1.ErrorHeader) != "" ||
			(resp.Header.Get(api.ReplayedHeader) == "true") != replay {
			t.Fatalf("proxy step, try %d: %d %q %v", i, resp.StatusCode, b, resp.Header)
		}
	}
	resp, b := e.do("POST", path, strings.NewReader("pong"), stepHdr("px", "1")...)
	wantError(t, resp, b, 409, api.CodeTrajectoryDiverged)
	// Nothing listening: bad_gateway, a result.
	closed := closedPort(t)
	for range 2 {
		resp, b = e.do("GET", "/v1/sandboxes/"+sb.ID+"/http/"+closed+"/", nil, stepHdr("px", "2")...)
		wantError(t, resp, b, 502, api.CodeBadGateway)
	}
	if resp.Header.Get(api.ReplayedHeader) != "true" || hits != 1 {
		t.Fatalf("bad_gateway replay: %v, %d hits", resp.Header, hits)
	}

	body := `{"language":"python3","files":{"main.py":"print(1)"},"tests":[{"stdin":"x"}]}`
	for i, replay := range []bool{false, true} {
		resp, b := e.do("POST", "/v1/fncall", strings.NewReader(body), stepHdr("px", "3")...)
		var r api.FnCallResult
		mustJSON(t, b, &r)
		if resp.StatusCode != 200 || r.Verdict != api.VerdictAccepted || r.Tests[0].Stdout != "1" ||
			(resp.Header.Get(api.ReplayedHeader) == "true") != replay {
			t.Fatalf("fncall step, try %d: %d %s", i, resp.StatusCode, b)
		}
	}
	if fc.n != 1 {
		t.Fatalf("fncall ran %d times", fc.n)
	}
	// Without a trajectory log a tagged request is refused, untagged ones run.
	plain := newEnv(t, v1.Options{})
	resp, b = plain.do("POST", "/v1/sandboxes/x/exec", strings.NewReader(`{"cmd":["echo"]}`), stepHdr("px", "1")...)
	wantError(t, resp, b, 501, api.CodeNotImplemented)
}
