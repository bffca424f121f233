package noderpc_test

import (
	"context"
	"slices"
	"testing"

	"github.com/dsec-dev/dsec/internal/backend/driver/mock"
	"github.com/dsec-dev/dsec/internal/cluster/noderpc"
	"github.com/dsec-dev/dsec/pkg/api"
)

func TestNodeStatus(t *testing.T) {
	m := mockAgent(t)
	c := serve(t, m, noderpc.HandlerOptions{}).client(t, nil)
	ctx := ctxT(t)
	for range 2 {
		if _, err := c.Create(ctx, api.CreateSandboxRequest{CPU: 0.5, MemoryBytes: 64 << 20}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := c.NodeStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Node != "mock-node" || st.Sandboxes != 2 || st.Running != 2 || st.CPU != 1 || st.MemoryBytes != 128<<20 ||
		!slices.Contains(st.Backends, mock.Name) {
		t.Errorf("NodeStatus = %+v", st)
	}
	// A node's own status function answers instead when it has one.
	c2 := serve(t, m, noderpc.HandlerOptions{Status: func(ctx context.Context) (noderpc.Status, error) {
		st, err := noderpc.StatusOf(ctx, m)
		st.MaxSandboxes = 7
		return st, err
	}}).client(t, nil)
	if st, err := c2.NodeStatus(ctx); err != nil || st.MaxSandboxes != 7 || st.Sandboxes != 2 {
		t.Errorf("NodeStatus with Status set = %+v, %v", st, err)
	}
}
