package router

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// stepNode is a fake node whose service logs steps (as the trajectory
// decorator does): it records the tagged HTTP steps and stream execs it got,
// and answers step 1 of every trajectory from "its log".
type stepNode struct {
	*fakeNode
	http   chan string // "METHOD path body step"
	stream chan api.ExecRequest
}

func (n *stepNode) HTTP(ctx context.Context, id string, port int, req session.HTTPRequest) (session.HTTPResponse, error) {
	b := []byte{}
	if req.Body != nil {
		b, _ = io.ReadAll(req.Body)
	}
	st, out, ok := session.StepFrom(ctx)
	tag := "untagged"
	if ok {
		tag = st.Trajectory
		out.Replayed = st.N == 1
	}
	n.http <- req.Method + " " + req.Path + " " + string(b) + " " + tag
	return session.HTTPResponse{Status: 200, Header: http.Header{"X-Node": {n.name}}, Body: io.NopCloser(strings.NewReader("from " + n.name))}, nil
}

func (n *stepNode) ExecStream(ctx context.Context, id string, req api.ExecRequest, st session.Stream) (api.ExecResult, error) {
	n.stream <- req
	return api.ExecResult{}, nil
}

// TestTaggedStepsThroughTheAPIServer: through an API server's /v1 (the
// router, no trajectory log of its own), a tagged proxy request becomes an
// HTTP step on the sandbox's node (replayed answers flagged), and a tagged
// stream exec keeps the request's own stdin in the request, where the node's
// decorator counts it in the step's fingerprint; an untagged stream's stdin
// still goes to the process as stream input.
func TestTaggedStepsThroughTheAPIServer(t *testing.T) {
	g := newRig(t, 2, 100, 100)
	sn := map[string]*stepNode{}
	for name, f := range g.nodes {
		sn[name] = &stepNode{fakeNode: f, http: make(chan string, 1), stream: make(chan api.ExecRequest, 1)}
	}
	r := New(Config{Nodes: g.view, Engine: g.engine,
		Dial: func(n cluster.NodeStatus) session.Service { return sn[n.Name] }})
	srv := httptest.NewServer(v1.New(r, v1.Options{Token: "tok", StepsDownstream: true}).Handler())
	defer srv.Close()
	do := func(method, path, body string, n int) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer tok")
		if n > 0 {
			req.Header.Set(api.TrajectoryHeader, "tr")
			req.Header.Set(api.StepHeader, string(rune('0'+n)))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	const id = "sb-0000000000000001.n2"
	for _, n := range []int{1, 2} {
		resp, body := do("POST", "/v1/sandboxes/"+id+"/http/8080/p/q?x=1", "payload", n)
		if resp.StatusCode != 200 || body != "from n2" || resp.Header.Get("X-Node") != "n2" {
			t.Fatalf("step %d: %d %q %v", n, resp.StatusCode, body, resp.Header)
		}
		if got, want := <-sn["n2"].http, "POST /p/q?x=1 payload tr"; got != want {
			t.Errorf("step %d: node n2 got %q, want %q", n, got, want)
		}
		if replayed := resp.Header.Get(api.ReplayedHeader) == "true"; replayed != (n == 1) {
			t.Errorf("step %d: X-Dsec-Replayed %v, want %v", n, replayed, n == 1)
		}
	}
	stream := func(n int) api.ExecRequest {
		t.Helper()
		resp, body := do("POST", "/v1/sandboxes/"+id+"/exec/stream", `{"cmd":["cat"],"stdin":"own stdin"}`+"\n", n)
		if resp.StatusCode != 200 {
			t.Fatalf("stream (step %d): %d %s", n, resp.StatusCode, body)
		}
		return <-sn["n2"].stream
	}
	if req := stream(2); req.Stdin != "own stdin" {
		t.Errorf("a tagged stream step reached the node with stdin %q: not in its fingerprint", req.Stdin)
	}
	if req := stream(0); req.Stdin != "" {
		t.Errorf("an untagged stream reached the node with stdin %q in the request, want it as stream input", req.Stdin)
	}
}
