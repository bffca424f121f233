package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/metrics/metricstest"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/internal/tracing/tracingtest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// A real `dsec server` counts a user's create, exec, failed create and delete
// exactly, serves /metrics only with the token (and open on --metrics-listen),
// exports the span tree of a create and an exec to an OTLP/HTTP collector, and
// puts the request ID in the response and in the request's log lines.
func TestMetricsAndTraces(t *testing.T) {
	col := tracingtest.NewCollector()
	defer col.Close()
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100") // export every 100 ms
	open := freePort(t)
	n := startNode(t, "--metrics-listen", open, "--otlp-endpoint", col.URL)
	ctx := context.Background()
	main := "http://" + n.addr + "/metrics"

	// /metrics needs the API token on the API listener.
	for _, tok := range []string{"", "wrong-token"} {
		if st, e := n.raw(t, "GET", "/metrics", tok, nil); st != http.StatusUnauthorized || e.Code != api.CodeUnauthorized {
			t.Errorf("GET /metrics with token %q: %d %q, want 401 unauthorized", tok, st, e.Code)
		}
	}
	// The open listener serves metrics and nothing else.
	before, err := metricstest.Scrape("http://"+open+"/metrics", "")
	if err != nil {
		t.Fatalf("open metrics listener: %v", err)
	}
	if resp, err := http.Get("http://" + open + "/v1/info"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("the open metrics listener serves /v1/info: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	req, _ := http.NewRequest("POST", "http://"+n.addr+"/v1/sandboxes", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+n.token)
	req.Header.Set("X-Request-Id", "e2e-create-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("X-Request-Id") != "e2e-create-1" {
		t.Fatalf("create: %s, request ID %q", resp.Status, resp.Header.Get("X-Request-Id"))
	}
	sbs, err := n.cl.List(ctx)
	if err != nil || len(sbs) != 1 {
		t.Fatalf("list: %v %v", sbs, err)
	}
	id := sbs[0].ID
	if r := n.sh(t, id, "true"); r.ExitCode != 0 {
		t.Fatalf("exec: %+v", r)
	}
	during, err := metricstest.Scrape(main, n.token)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.cl.Create(ctx, api.CreateSandboxRequest{Image: "no-such-image"}); err == nil {
		t.Fatal("create on a missing image succeeded")
	}
	if err := n.cl.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	fc, err := n.cl.FnCall(ctx, api.FnCallRequest{Language: api.LangPython3, Files: map[string]string{"main.py": "print(1)"},
		Tests: []api.FnCallTest{{}}})
	if err != nil || fc.Verdict != api.VerdictAccepted {
		t.Fatalf("fncall: %+v %v", fc, err)
	}
	// SandboxFusion's FnCalls are counted like /v1's.
	if code, out := sfPost(t, "http://"+n.addr+"/run_code", n.token, verlPayload("print(1)", "", "python", 10)); code != http.StatusOK {
		t.Fatalf("run_code: %d %s", code, out)
	}
	after, err := metricstest.Scrape(main, n.token)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"dsec_sandbox_creates_total", []string{"backend=container", "result=ok"}, 1},
		{"dsec_sandbox_creates_total", []string{"backend=container", "result=error"}, 1},
		{"dsec_sandbox_create_duration_seconds_count", []string{"backend=container", "result=ok"}, 1},
		{"dsec_sandbox_create_duration_seconds_count", []string{"backend=container", "result=error"}, 1},
		{"dsec_sandbox_create_phase_duration_seconds_count", []string{"backend=container", "phase=admission"}, 1},
		{"dsec_sandbox_create_phase_duration_seconds_count", []string{"backend=container", "phase=start"}, 1},
		{"dsec_execs_total", []string{"mode=exec", "result=ok"}, 1},
		{"dsec_exec_duration_seconds_count", []string{"mode=exec"}, 1},
		{"dsec_sandbox_deletes_total", []string{"result=ok"}, 1},
		{"dsec_fncall_verdicts_total", []string{"verdict=accepted"}, 2},
		{"dsec_fncall_duration_seconds_count", nil, 2},
		{"dsec_http_requests_total", []string{"route=POST /run_code", "status=200"}, 1},
		{"dsec_session_errors_total", []string{"op=create", "code=not_found", "infrastructure=false"}, 1},
		{"dsec_errors_total", []string{"code=not_found", "infrastructure=false"}, 1},
		{"dsec_http_requests_total", []string{"route=POST /v1/sandboxes", "status=201"}, 1},
		{"dsec_http_requests_total", []string{"route=POST /v1/sandboxes", "status=404"}, 1},
		{"dsec_http_requests_total", []string{"route=POST /v1/sandboxes/{id}/exec", "status=200"}, 1},
		{"dsec_http_requests_total", []string{"route=DELETE /v1/sandboxes/{id}", "status=204"}, 1},
		// The two refused scrapes, then "during" (the scrape "after" is counted
		// once it has been answered).
		{"dsec_http_requests_total", []string{"route=/metrics", "status=401"}, 0},
		{"dsec_http_requests_total", []string{"route=/metrics", "status=200"}, 1},
	} {
		if got := after.Value(c.name, c.labels...) - before.Value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v moved by %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if got := during.Value("dsec_sandboxes", "backend=container", "state=running"); got != 1 {
		t.Errorf("running sandboxes while one ran: %v", got)
	}
	if got := after.Value("dsec_sandboxes", "state=running"); got != 0 {
		t.Errorf("running sandboxes after the delete: %v", got)
	}
	if after.Value("dsec_fncall_pool_slots", "image=judge") <= 0 {
		t.Error("no FnCall pool slots after a FnCall")
	}
	if after.Value("dsec_node_memory_total_bytes") <= 0 || after.Value("dsec_node_cpus") <= 0 {
		t.Error("no node capacity")
	}
	after.Labels(func(metric, label, v string) {
		if strings.Contains(v, id) {
			t.Errorf("%s has label %s=%q", metric, label, v)
		}
	})

	// Traces: one tree per request, server -> session -> agent -> driver.
	want := map[string][]string{
		"POST /v1/sandboxes": {
			"POST /v1/sandboxes > session.create", "session.create > agent.create",
			"agent.create > agent.admission", "agent.create > driver.start"},
		"POST /v1/sandboxes/{id}/exec": {
			"POST /v1/sandboxes/{id}/exec > session.exec", "session.exec > agent.exec", "agent.exec > driver.exec"},
	}
	deadline := time.Now().Add(20 * time.Second)
	for root, edges := range want {
		var tree map[string]bool
		var missing []string
		complete := testwait.Until(time.Until(deadline), func() bool {
			spans := col.Spans()
			tree = nil
			for _, s := range spans {
				// The successful create is the one with our request ID (the
				// failed create has a trace of its own).
				if s.GetName() == root && s.Service == "dsec-server" && (root != "POST /v1/sandboxes" || s.Attr("dsec.request_id") == "e2e-create-1") {
					tree = tracingtest.Tree(spans, s.TraceID())
				}
			}
			missing = []string{}
			for _, e := range edges {
				if !tree[e] {
					missing = append(missing, e)
				}
			}
			return len(missing) == 0
		})
		if !complete {
			t.Errorf("trace of %s lacks %v; it has %v (collector refused %v)", root, missing, tree, col.Bad())
		}
	}

	// The create's log lines carry its request ID (read once the server stopped).
	n.stop(true)
	var lines []string
	for _, l := range strings.Split(n.logs.String(), "\n") {
		if strings.Contains(l, "request_id=e2e-create-1") {
			lines = append(lines, l)
		}
	}
	if len(lines) < 2 { // the agent's "created sandbox" and the request log
		t.Errorf("%d log lines carry the create's request ID, want its request and agent lines:\n%s", len(lines), strings.Join(lines, "\n"))
	}
}
