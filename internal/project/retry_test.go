package project_test

import (
	"context"
	"testing"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// batchNode is a node with a batch create (one Create per member, as the
// router's nodes deduplicate request IDs).
type batchNode struct{ *agenttest.Node }

func (b batchNode) CreateBatch(ctx context.Context, reqs []api.CreateSandboxRequest) ([]api.Sandbox, error) {
	out := make([]api.Sandbox, len(reqs))
	for i, r := range reqs {
		sb, err := b.Create(ctx, r)
		if err != nil {
			return nil, err
		}
		out[i] = sb
	}
	return out, nil
}

// A create (or a batch re-sent whole) whose request IDs were answered gets
// its sandboxes back even when the project is at its quota; a new request ID
// is still refused, and another project's request ID is never answered with
// the first project's sandbox.
func TestRetriedRequestIDAtQuota(t *testing.T) {
	ctx := context.Background()
	node := agenttest.NewNode(t)
	_, ts := serveGuard(t, batchNode{node}, nil)
	cl := func(tok string) *client.Client { return client.New(ts.URL, tok, client.WithRetry(0)) }
	adm := cl(admin)
	a, err := adm.CreateProject(ctx, "a", api.Quota{MaxSandboxes: 3})
	if err != nil {
		t.Fatal(err)
	}
	b, err := adm.CreateProject(ctx, "b", api.Quota{MaxSandboxes: 10})
	if err != nil {
		t.Fatal(err)
	}
	ca, cb := cl(a.Token), cl(b.Token)
	s1, err := ca.Create(ctx, api.CreateSandboxRequest{RequestID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	batch := []api.CreateSandboxRequest{{RequestID: "b1"}, {RequestID: "b2"}}
	first, err := ca.CreateBatch(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	// At the quota now (3 of 3).
	if _, err := ca.Create(ctx, api.CreateSandboxRequest{RequestID: "r-new"}); code(err) != api.CodeQuotaExceeded {
		t.Fatalf("a new request ID at the quota: %v", err)
	}
	again, err := ca.Create(ctx, api.CreateSandboxRequest{RequestID: "r1"})
	if err != nil || again.ID != s1.ID {
		t.Fatalf("retried request ID at the quota: %+v %v, want %s", again, err, s1.ID)
	}
	resent, err := ca.CreateBatch(ctx, batch)
	if err != nil || len(resent) != 2 || resent[0].ID != first[0].ID || resent[1].ID != first[1].ID {
		t.Fatalf("batch re-sent whole at the quota: %+v %v", resent, err)
	}
	// A batch mixing an answered ID with a new one needs room for the new one.
	if _, err := ca.CreateBatch(ctx, []api.CreateSandboxRequest{{RequestID: "b1"}, {RequestID: "b3"}}); code(err) != api.CodeQuotaExceeded {
		t.Fatalf("batch with one new request ID at the quota: %v", err)
	}
	if p, _ := adm.Project(ctx, "a"); p.Usage.Sandboxes != 3 {
		t.Fatalf("usage %+v after the retries, want 3", p.Usage)
	}
	if l, _ := ca.List(ctx); len(l) != 3 {
		t.Fatalf("a has %d sandboxes, want 3", len(l))
	}
	// B re-using A's request ID gets a conflict, never A's sandbox.
	if sb, err := cb.Create(ctx, api.CreateSandboxRequest{RequestID: "r1"}); code(err) != api.CodeConflict {
		t.Fatalf("b with a's request ID: %+v %v", sb, err)
	}
	if sbs, err := cb.CreateBatch(ctx, []api.CreateSandboxRequest{{RequestID: "fresh"}, {RequestID: "b2"}}); code(err) != api.CodeConflict {
		t.Fatalf("b's batch with a's request ID: %+v %v", sbs, err)
	}
	if l, _ := cb.List(ctx); len(l) != 0 {
		t.Fatalf("b keeps %d sandboxes after the refused batch", len(l))
	}
	if p, _ := adm.Project(ctx, "b"); p.Usage.Sandboxes != 0 {
		t.Fatalf("b's usage %+v after the refusals", p.Usage)
	}
	// B at its own quota retrying A's ID is refused too (quota, not A's sandbox).
	if _, err := adm.SetQuota(ctx, "b", api.Quota{MaxSandboxes: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := cb.Create(ctx, api.CreateSandboxRequest{RequestID: "mine"}); err != nil {
		t.Fatal(err)
	}
	if sb, err := cb.Create(ctx, api.CreateSandboxRequest{RequestID: "r1"}); code(err) != api.CodeQuotaExceeded {
		t.Fatalf("b at its quota with a's request ID: %+v %v", sb, err)
	}
}
