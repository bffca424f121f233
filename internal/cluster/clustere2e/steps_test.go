package clustere2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// proxyAndStreamSteps are TestCluster's cases for trajectory steps that need
// more than a unary call through an API server: a tagged HTTP proxy request is
// a step logged on the sandbox's node and replayed through the other API
// server; a stream step's own stdin is part of its fingerprint, so re-issuing
// it with other stdin diverges, as on dsec server.
func (e *env) proxyAndStreamSteps(t *testing.T, ctx context.Context, id string) {
	if _, err := e.client(0).Exec(ctx, id, api.ExecRequest{Cmd: []string{"sh", "-c", "mkdir -p /tmp/www && echo first > /tmp/www/page"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client(0).StartProcess(ctx, id, api.ExecRequest{Cmd: []string{"python3", "-m", "http.server", "8080", "-d", "/tmp/www"}}); err != nil {
		t.Fatalf("start the sandbox's web server: %v", err)
	}
	page := "/v1/sandboxes/" + id + "/http/8080/page"
	e.waitFor("the sandbox's web server", 20*time.Second, func() error {
		if st, _, body := e.raw(t, 1, "GET", page, nil); st != 200 || body != "first\n" {
			return fmt.Errorf("GET %s: %d %q", page, st, body)
		}
		return nil
	})

	t.Run("HTTP proxy step replayed through the other API server", func(t *testing.T) {
		traj := "e2e-http-" + randHex(4)
		st0, h0, b0 := e.stepReq(t, 0, "GET", page, traj, 1, "")
		if st0 != 200 || b0 != "first\n" || h0.Get(api.ReplayedHeader) != "" {
			t.Fatalf("step 1 via API server 0: %d replayed=%q %q", st0, h0.Get(api.ReplayedHeader), b0)
		}
		// The page changes; the re-issued step is answered from the node's log.
		if _, err := e.client(0).Exec(ctx, id, api.ExecRequest{Cmd: []string{"sh", "-c", "echo second > /tmp/www/page"}}); err != nil {
			t.Fatal(err)
		}
		st1, h1, b1 := e.stepReq(t, 1, "GET", page, traj, 1, "")
		if st1 != 200 || b1 != "first\n" || h1.Get(api.ReplayedHeader) != "true" {
			t.Errorf("step 1 re-issued via API server 1: %d replayed=%q %q, want the logged answer", st1, h1.Get(api.ReplayedHeader), b1)
		}
		if st, h, b := e.stepReq(t, 1, "GET", page, traj, 2, ""); st != 200 || b != "second\n" || h.Get(api.ReplayedHeader) != "" {
			t.Errorf("step 2 (new) via API server 1: %d replayed=%q %q", st, h.Get(api.ReplayedHeader), b)
		}
		if st, _, b := e.stepReq(t, 0, "GET", "/v1/sandboxes/"+id+"/http/8080/other", traj, 2, ""); st != http.StatusConflict || !strings.Contains(b, string(api.CodeTrajectoryDiverged)) {
			t.Errorf("step 2 re-issued with another path: %d %s, want 409 trajectory_diverged", st, b)
		}
		got, err := e.client(0).GetTrajectory(ctx, traj)
		if err != nil || got.SandboxID != id || len(got.Steps) != 2 {
			t.Errorf("trajectory via API server 0: %+v %v", got, err)
		}
	})

	t.Run("stream step's stdin is part of its fingerprint", func(t *testing.T) {
		traj := "e2e-stream-" + randHex(4)
		stream := "/v1/sandboxes/" + id + "/exec/stream"
		req := func(stdin string) string {
			b, _ := json.Marshal(api.ExecRequest{Cmd: []string{"sh", "-c", "cat; head -c 8 /dev/urandom | od -An -tx1"}, Stdin: stdin})
			return string(b) + "\n"
		}
		st0, h0, b0 := e.stepReq(t, 0, "POST", stream, traj, 1, req("alpha"))
		if st0 != 200 || !strings.HasPrefix(stdoutOf(b0), "alpha") || h0.Get(api.ReplayedHeader) != "" {
			t.Fatalf("stream step via API server 0: %d replayed=%q %s", st0, h0.Get(api.ReplayedHeader), b0)
		}
		if st, _, b := e.stepReq(t, 1, "POST", stream, traj, 1, req("beta")); st != http.StatusConflict || !strings.Contains(b, string(api.CodeTrajectoryDiverged)) {
			t.Errorf("stream step re-issued with other stdin via API server 1: %d %s, want 409 trajectory_diverged", st, b)
		}
		st1, h1, b1 := e.stepReq(t, 1, "POST", stream, traj, 1, req("alpha"))
		if st1 != 200 || h1.Get(api.ReplayedHeader) != "true" || stdoutOf(b1) != stdoutOf(b0) {
			t.Errorf("stream step re-issued with the same stdin via API server 1: %d replayed=%q %q, want %q", st1, h1.Get(api.ReplayedHeader), stdoutOf(b1), stdoutOf(b0))
		}
	})
}

// stepReq sends one request tagged as step n of trajectory traj, with a raw body.
func (e *env) stepReq(t *testing.T, i int, method, path, traj string, n int, body string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+e.apiAddr[i]+path, strings.NewReader(body))
	req.Header.Set(api.TrajectoryHeader, traj)
	req.Header.Set(api.StepHeader, strconv.Itoa(n))
	return e.do(t, req)
}

// stdoutOf joins the stdout events of an NDJSON exec stream.
func stdoutOf(stream string) string {
	var out strings.Builder
	for _, line := range strings.Split(stream, "\n") {
		var ev api.StreamEvent
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Type == "stdout" {
			out.Write(ev.Data)
		}
	}
	return out.String()
}
