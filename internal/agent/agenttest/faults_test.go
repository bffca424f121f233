package agenttest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestFaults: the next N calls of a method fail with the injected error
// without reaching the node; the others run and are counted, reads of a
// sandbox's record are not; FnCalls answers FnCall over the agent.
func TestFaults(t *testing.T) {
	ctx := context.Background()
	f := &agenttest.Faults{}
	fn := func(context.Context, api.FnCallRequest) (api.FnCallResult, error) {
		return api.FnCallResult{Verdict: api.VerdictAccepted}, nil
	}
	svc := session.Chain(agenttest.New(t, agenttest.Options{}), f.Interceptor(), agenttest.FnCalls(fn))
	sb, err := svc.Create(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Get(ctx, sb.ID); err != nil || f.Runs() != 0 {
		t.Fatalf("create and get counted: %d runs, %v", f.Runs(), err)
	}
	f.FailNext("Exec", 2, errdefs.New(api.CodeUnavailable, "injected"))
	for i := range 2 {
		if _, err := svc.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"echo", "x"}}); !errdefs.Is(err, api.CodeUnavailable) {
			t.Fatalf("call %d: %v, want the injected error", i+1, err)
		}
	}
	if f.Runs() != 0 {
		t.Fatalf("failed calls counted: %d", f.Runs())
	}
	res, err := svc.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"echo", "x"}})
	if err != nil || res.Stdout != "x\n" || f.Runs() != 1 {
		t.Fatalf("third exec: %+v %v, %d runs", res, err, f.Runs())
	}
	fs, err := svc.FS(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	f.FailNext("WriteFile", 1, errdefs.Invalid("injected write"))
	if _, err := fs.WriteFile(ctx, "/tmp/a", 0o644, strings.NewReader("a"), 10); !errdefs.Is(err, api.CodeInvalidArgument) {
		t.Fatalf("write: %v", err)
	}
	if _, err := fs.WriteFile(ctx, "/tmp/a", 0o644, strings.NewReader("a"), 10); err != nil || f.Runs() != 2 {
		t.Fatalf("second write: %v, %d runs", err, f.Runs())
	}
	if fc, err := svc.FnCall(ctx, api.FnCallRequest{}); err != nil || fc.Verdict != api.VerdictAccepted || f.Runs() != 3 {
		t.Fatalf("fncall: %+v %v, %d runs", fc, err, f.Runs())
	}
}
