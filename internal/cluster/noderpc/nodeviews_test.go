package noderpc_test

import (
	"testing"

	"github.com/dsec-dev/dsec/internal/cluster/noderpc"
	"github.com/dsec-dev/dsec/pkg/api"
)

// A node's image list and its sandboxes' use cross the wire (the API server's
// dashboard asks for them); a node service without them answers
// not_implemented.
func TestImagesAndUsageOverRPC(t *testing.T) {
	m := mockAgent(t)
	c := serve(t, m, noderpc.HandlerOptions{}).client(t, nil)
	ctx := ctxT(t)
	a, err := c.Create(ctx, api.CreateSandboxRequest{CPU: 0.5, MemoryBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(ctx, api.CreateSandboxRequest{}); err != nil {
		t.Fatal(err)
	}
	imgs, err := c.Images(ctx)
	if err != nil || len(imgs) != 1 || imgs[0].Name != "tiny" || !imgs[0].Default {
		t.Fatalf("images %+v %v, want the node's one image", imgs, err)
	}
	us, err := c.SandboxUsage(ctx, []string{a.ID, "sb-0000000000000000.mock-node"})
	if err != nil || len(us) != 1 {
		t.Fatalf("usage of one sandbox and an unknown one: %+v %v", us, err)
	}
	if u := us[0]; u.ID != a.ID || u.CPULimit != 0.5 || u.MemoryLimitBytes != 64<<20 || u.State != api.StateRunning {
		t.Errorf("usage %+v", u)
	}
	if all, err := c.SandboxUsage(ctx, nil); err != nil || len(all) != 2 {
		t.Errorf("usage of all: %+v %v", all, err)
	}
	fc := serve(t, &fakeService{}, noderpc.HandlerOptions{}).client(t, nil)
	if _, err := fc.Images(ctx); err == nil {
		t.Error("a service without images answered Images")
	} else {
		wantCode(t, "Images", err, api.CodeNotImplemented)
	}
	_, err = fc.SandboxUsage(ctx, nil)
	wantCode(t, "SandboxUsage", err, api.CodeNotImplemented)
}
