package metrics_test

import (
	"io"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/cluster/noderpc"
	"github.com/dsec-dev/dsec/internal/cluster/noderpc/noderpctest"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/metrics"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// The agent passes its registry as the node RPC's Observer (cmd/dsec agent).
var _ noderpc.Observer = (*metrics.Metrics)(nil)

// An agent's node RPC listener counts every request by procedure and code,
// refused ones included, and times it: a create, a failed create, an exec, a
// streamed exec and a delete through a real node RPC client, and a call with
// the wrong cluster secret, move the counters by exactly that much.
func TestRPCCountsMoveExactly(t *testing.T) {
	s := newStack(t, nil)
	secret := []byte("0123456789abcdef0123456789abcdef")
	url, _ := noderpctest.Serve(t, s.mgr, noderpc.HandlerOptions{Secret: secret, Observer: s.m})
	c := noderpc.NewClient(url, noderpc.ClientOptions{Secret: secret})
	t.Cleanup(func() { c.Close() })
	ctx := t.Context()

	before := scrape(t, s.url)
	sb, err := c.Create(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(ctx, api.CreateSandboxRequest{Image: "no-such-image"}); !errdefs.Is(err, api.CodeNotFound) {
		t.Fatalf("create on a missing image: %v, want not_found", err)
	}
	if res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"echo", "hi"}}); err != nil || res.Stdout != "hi\n" {
		t.Fatalf("exec: %+v %v", res, err)
	}
	var out strings.Builder
	if res, err := c.ExecStream(ctx, sb.ID, api.ExecRequest{Cmd: []string{"echo", "streamed"}}, session.Stream{Stdout: &out, Stderr: io.Discard}); err != nil || res.ExitCode != 0 {
		t.Fatalf("stream: %+v %v", res, err)
	}
	if err := c.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	intruder := noderpc.NewClient(url, noderpc.ClientOptions{Secret: []byte("another secret, not the cluster's")})
	t.Cleanup(func() { intruder.Close() })
	if _, err := intruder.Info(ctx); !errdefs.Is(err, api.CodeUnauthorized) {
		t.Fatalf("info with the wrong secret: %v, want unauthorized", err)
	}
	after := scrape(t, s.url)

	wantMoved(t, before, after, []moved{
		{"dsec_rpc_requests_total", []string{"procedure=Create", "code=ok"}, 1},
		{"dsec_rpc_requests_total", []string{"procedure=Create", "code=not_found"}, 1},
		{"dsec_rpc_requests_total", []string{"procedure=Exec", "code=ok"}, 1},
		{"dsec_rpc_requests_total", []string{"procedure=ExecStream", "code=ok"}, 1},
		{"dsec_rpc_requests_total", []string{"procedure=Delete", "code=ok"}, 1},
		{"dsec_rpc_requests_total", []string{"procedure=Info", "code=unauthorized"}, 1},
		{"dsec_rpc_requests_total", nil, 6}, // nothing else
		{"dsec_rpc_request_duration_seconds_count", []string{"procedure=Create"}, 2},
		{"dsec_rpc_request_duration_seconds_count", []string{"procedure=ExecStream"}, 1},
		{"dsec_rpc_request_duration_seconds_count", nil, 6},
		// The node's own work is counted as before: its create phases.
		{"dsec_sandbox_create_phase_duration_seconds_count", []string{"backend=mock", "phase=start"}, 1},
	})
	after.Labels(func(metric, label, v string) {
		if strings.Contains(v, sb.ID) {
			t.Errorf("%s has label %s=%q", metric, label, v)
		}
	})
}
