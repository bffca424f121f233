package noderpc_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/cluster/noderpc"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// httpNode is a fake node whose service sends HTTP steps (as the trajectory
// decorator does): it records what arrived and answers step 1 from "its log".
type httpNode struct {
	fakeService
	got  chan httpSeen
	body []byte // the answer's body
}

type httpSeen struct {
	port    int
	req     session.HTTPRequest
	body    []byte
	step    session.Step
	tagged  bool
	hasBody bool
}

func (n *httpNode) HTTP(ctx context.Context, id string, port int, req session.HTTPRequest) (session.HTTPResponse, error) {
	seen := httpSeen{port: port, req: req, hasBody: req.Body != nil}
	if req.Body != nil {
		seen.body, _ = io.ReadAll(req.Body)
	}
	st, out, ok := session.StepFrom(ctx)
	seen.step, seen.tagged = st, ok
	if ok {
		out.Replayed = st.N == 1
	}
	n.got <- seen
	if port == 9 {
		return session.HTTPResponse{}, api.NewError(api.CodeBadGateway, "proxy to port 9 of sandbox %s: connection refused", id)
	}
	h := http.Header{"X-App": {"yes"}, "Content-Type": {"application/octet-stream"}}
	return session.HTTPResponse{Status: 201, Header: h, Body: io.NopCloser(bytes.NewReader(n.body))}, nil
}

// TestHTTPStepCrossesTheWire: a tagged HTTP request to a sandbox port reaches
// the node's HTTP (session.HTTPProxy) with method, path, headers, body and step tag intact; the
// answer (status, headers, binary body) comes back, a step the node answered
// from its log is reported replayed, the node's errors keep their code, and a
// node without HTTP steps answers not_implemented.
func TestHTTPStepCrossesTheWire(t *testing.T) {
	node := &httpNode{got: make(chan httpSeen, 1), body: []byte("\x00answer\xff")}
	c := serve(t, node, noderpc.HandlerOptions{}).client(t, nil)
	for _, n := range []int{1, 2} {
		ctx, out := session.WithStep(ctxT(t), session.Step{Trajectory: "t", N: n})
		resp, err := c.HTTP(ctx, screenSB, 8080, session.HTTPRequest{Method: "POST", Path: "/a/b?q=1",
			Header: http.Header{"Content-Type": {"text/plain"}}, Body: strings.NewReader("hello\x00"), ContentLength: 6})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.Status != 201 || resp.Header.Get("X-App") != "yes" || !bytes.Equal(b, node.body) {
			t.Errorf("answer: %d %v %q", resp.Status, resp.Header, b)
		}
		seen := <-node.got
		if seen.port != 8080 || seen.req.Method != "POST" || seen.req.Path != "/a/b?q=1" || seen.req.Header.Get("Content-Type") != "text/plain" ||
			string(seen.body) != "hello\x00" || seen.req.ContentLength != 6 {
			t.Errorf("the node got port %d %+v body %q", seen.port, seen.req, seen.body)
		}
		if !seen.tagged || seen.step != (session.Step{Trajectory: "t", N: n}) {
			t.Errorf("the node saw step %+v (tagged %v), want t/%d", seen.step, seen.tagged, n)
		}
		if out.Replayed != (n == 1) {
			t.Errorf("step %d: replayed %v, want %v", n, out.Replayed, n == 1)
		}
	}
	// A GET without a body arrives without one.
	if _, err := c.HTTP(ctxT(t), screenSB, 8080, session.HTTPRequest{Method: "GET", Path: "/"}); err != nil {
		t.Fatal(err)
	}
	if seen := <-node.got; seen.hasBody || seen.tagged {
		t.Errorf("an untagged GET arrived with a body (%v) or tagged (%v)", seen.hasBody, seen.tagged)
	}
	_, err := c.HTTP(ctxT(t), screenSB, 9, session.HTTPRequest{Method: "GET", Path: "/"})
	<-node.got
	wantCode(t, "HTTP to a closed port", err, api.CodeBadGateway)
	plain := serve(t, &fakeService{}, noderpc.HandlerOptions{}).client(t, nil)
	_, err = plain.HTTP(ctxT(t), screenSB, 8080, session.HTTPRequest{Method: "GET", Path: "/"})
	wantCode(t, "HTTP on a node without HTTP steps", err, api.CodeNotImplemented)
}
