package metrics_test

import (
	"context"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/tracing/tracingtest"
)

// A create and an exec each make one trace server -> session -> agent ->
// driver, continuing the trace of the client's traceparent.
func TestSpanTree(t *testing.T) {
	s := newStack(t, nil)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	do := func(method, path, body, trace string) *http.Response {
		req, _ := http.NewRequest(method, s.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Traceparent", "00-"+trace+"-00f067aa0ba902b7-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	resp := do("POST", "/v1/sandboxes", `{}`, traceID)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %s", resp.Status)
	}
	sbs, err := s.cl.List(context.Background())
	if err != nil || len(sbs) != 1 {
		t.Fatalf("list: %v %v", sbs, err)
	}
	const execTrace = "5bf92f3577b34da6a3ce929d0e0e4737"
	if resp := do("POST", "/v1/sandboxes/"+sbs[0].ID+"/exec", `{"cmd":["true"]}`, execTrace); resp.StatusCode != http.StatusOK {
		t.Fatalf("exec: %s", resp.Status)
	}
	if err := s.tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := s.col.Spans()
	for _, c := range []struct {
		trace string
		want  []string
	}{
		{traceID, []string{
			"(root) > POST /v1/sandboxes", // its parent is the client's span
			"POST /v1/sandboxes > session.create",
			"session.create > agent.create",
			"agent.create > agent.admission",
			"agent.create > driver.start",
		}},
		{execTrace, []string{
			"(root) > POST /v1/sandboxes/{id}/exec",
			"POST /v1/sandboxes/{id}/exec > session.exec",
			"session.exec > agent.exec",
			"agent.exec > driver.exec",
		}},
	} {
		got := tracingtest.Tree(spans, c.trace)
		for _, e := range c.want {
			if !got[e] {
				t.Errorf("trace %s lacks %q; it has %v", c.trace, e, got)
			}
		}
		if len(got) != len(c.want) {
			t.Errorf("trace %s has %d spans, want %d: %v", c.trace, len(got), len(c.want), got)
		}
	}
	for _, sp := range spans {
		if sp.GetName() == "POST /v1/sandboxes" && hex.EncodeToString(sp.GetParentSpanId()) != "00f067aa0ba902b7" {
			t.Errorf("the server span does not continue the client's span: parent %x", sp.GetParentSpanId())
		}
	}
}
