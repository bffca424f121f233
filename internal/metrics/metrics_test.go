package metrics_test

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// A user's create, execs (one of them a replayed trajectory step), failed
// create and delete move every counter and histogram by exactly that much.
func TestCountsMoveExactly(t *testing.T) {
	s := newStack(t, nil)
	ctx := context.Background()
	before := scrape(t, s.url)

	sb, err := s.cl.Create(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.cl.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"echo", "hi"}}); err != nil || res.Stdout != "hi\n" {
		t.Fatalf("exec: %+v %v", res, err)
	}
	var out strings.Builder
	if res, err := s.cl.ExecStream(ctx, sb.ID, api.ExecRequest{Cmd: []string{"echo", "streamed"}}, nil, &out, io.Discard); err != nil || res.ExitCode != 0 || out.String() != "streamed\n" {
		t.Fatalf("stream: %+v %q %v", res, out.String(), err)
	}
	step := client.WithTrajectory(ctx, "traj-1", 1)
	for i := range 2 { // the second is answered from the log: it runs nothing
		res, err := s.cl.Exec(step, sb.ID, api.ExecRequest{Cmd: []string{"true"}})
		if err != nil || res.Replayed != (i == 1) {
			t.Fatalf("step, try %d: %+v %v", i, res, err)
		}
	}
	for _, v := range []string{api.VerdictAccepted, api.VerdictWrongAnswer, "made-up"} {
		if res, err := s.cl.FnCall(ctx, api.FnCallRequest{Language: "python3", Files: map[string]string{"verdict": v}}); err != nil || res.Verdict != v {
			t.Fatalf("fncall: %+v %v", res, err)
		}
	}
	during := scrape(t, s.url)
	_, err = s.cl.Create(ctx, api.CreateSandboxRequest{Image: "no-such-image"})
	if !errdefs.Is(err, api.CodeNotFound) {
		t.Fatalf("create on a missing image: %v, want not_found", err)
	}
	if err := s.cl.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	after := scrape(t, s.url)

	wantMoved(t, before, after, []moved{
		{"dsec_sandbox_creates_total", []string{"backend=mock", "result=ok"}, 1},
		{"dsec_sandbox_creates_total", []string{"backend=mock", "result=error"}, 1},
		{"dsec_sandbox_create_duration_seconds_count", []string{"backend=mock", "result=ok"}, 1},
		{"dsec_sandbox_create_duration_seconds_count", []string{"backend=mock", "result=error"}, 1},
		// The failed create ended before admission (its image does not exist).
		{"dsec_sandbox_create_phase_duration_seconds_count", []string{"backend=mock", "phase=admission"}, 1},
		{"dsec_sandbox_create_phase_duration_seconds_count", []string{"backend=mock", "phase=start"}, 1},
		{"dsec_sandbox_create_phase_duration_seconds_count", []string{"phase=image_mount"}, 0},
		{"dsec_admission_rejections_total", nil, 0},
		{"dsec_execs_total", []string{"mode=exec", "result=ok"}, 2},
		{"dsec_exec_duration_seconds_count", []string{"mode=exec"}, 2},
		{"dsec_execs_total", []string{"mode=stream", "result=ok"}, 1},
		{"dsec_exec_duration_seconds_count", []string{"mode=stream"}, 1},
		{"dsec_http_requests_total", []string{"route=POST /v1/sandboxes/{id}/exec/stream", "status=200"}, 1},
		{"dsec_trajectory_steps_total", []string{"op=exec", "result=live"}, 1},
		{"dsec_trajectory_steps_total", []string{"op=exec", "result=replayed"}, 1},
		{"dsec_sandbox_deletes_total", []string{"result=ok"}, 1},
		{"dsec_fncall_verdicts_total", []string{"verdict=accepted"}, 1},
		{"dsec_fncall_verdicts_total", []string{"verdict=wrong_answer"}, 1},
		{"dsec_fncall_verdicts_total", []string{"verdict=other"}, 1}, // bounded
		{"dsec_fncall_duration_seconds_count", nil, 3},
		{"dsec_session_errors_total", []string{"op=create", "code=not_found", "infrastructure=false"}, 1},
		{"dsec_session_errors_total", nil, 1},
		{"dsec_errors_total", []string{"code=not_found", "infrastructure=false"}, 1},
		{"dsec_errors_total", nil, 1},
		{"dsec_http_requests_total", []string{"route=POST /v1/sandboxes", "status=201"}, 1},
		{"dsec_http_requests_total", []string{"route=POST /v1/sandboxes", "status=404"}, 1},
		{"dsec_http_requests_total", []string{"route=POST /v1/sandboxes/{id}/exec", "status=200"}, 3},
		{"dsec_http_requests_total", []string{"route=DELETE /v1/sandboxes/{id}"}, 1},
		{"dsec_http_request_duration_seconds_count", []string{"route=POST /v1/sandboxes/{id}/exec"}, 3},
		// Two scrapes happened between before and after (during, and the one
		// that is counted once it has been answered).
		{"dsec_http_requests_total", []string{"route=/metrics", "status=200"}, 2},
	})
	// Sandboxes by state are read at scrape time.
	if got := during.Value("dsec_sandboxes", "backend=mock", "state=running"); got != 1 {
		t.Errorf("running sandboxes while one ran: %v", got)
	}
	if got := after.Value("dsec_sandboxes", "backend=mock", "state=running"); got != 0 {
		t.Errorf("running sandboxes after the delete: %v", got)
	}
	if got := after.Value("dsec_node_capacity_sandboxes"); got != 100000 {
		t.Errorf("capacity %v", got)
	}
	// A node without a warm pool shows it empty, of size 0.
	for _, name := range []string{"dsec_warm_pool_sandboxes", "dsec_warm_pool_size"} {
		if after[name] == nil || after.Value(name) != 0 {
			t.Errorf("%s without a warm pool: %v, want a series at 0", name, after[name])
		}
	}
	// No label carries a sandbox ID or a raw path.
	after.Labels(func(metric, label, v string) {
		if strings.Contains(v, sb.ID) {
			t.Errorf("%s has label %s=%q", metric, label, v)
		}
	})
}
