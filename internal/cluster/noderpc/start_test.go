package noderpc_test

import (
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/cluster/noderpc"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestStartCommandOverRPC: an API server's create carries the start command
// and readiness check to the node, which waits for them; a failed start
// comes back as start_failed with the command's output, its sandbox kept.
func TestStartCommandOverRPC(t *testing.T) {
	c := serve(t, mockAgent(t), noderpc.HandlerOptions{}).client(t, nil)
	sb, err := c.Create(ctxT(t), api.CreateSandboxRequest{StartCmd: "exec sleep 30", ReadyCmd: "true", ReadyTimeoutMs: 20_000})
	if err != nil || sb.Start == nil || sb.Start.State != api.StartReady {
		t.Fatalf("create with a start command over RPC: %+v, %v", sb.Start, err)
	}
	_, err = c.Create(ctxT(t), api.CreateSandboxRequest{StartCmd: "echo bad flag >&2; exit 2", ReadyCmd: "false"})
	ae, ok := api.AsError(err)
	if !ok || ae.Code != api.CodeStartFailed || ae.Infrastructure || ae.Status != 422 ||
		!strings.Contains(ae.Message, "exit code 2") || !strings.Contains(ae.Message, "bad flag") {
		t.Fatalf("failed start over RPC: %v", err)
	}
	all, err := c.List(ctxT(t))
	if err != nil || len(all) != 2 {
		t.Errorf("list: %d sandboxes, %v; want the failed start's kept", len(all), err)
	}
}
