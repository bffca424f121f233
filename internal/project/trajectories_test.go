package project_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/internal/frontend/v1/openapitest"
	"github.com/dsec-dev/dsec/internal/project"
	"github.com/dsec-dev/dsec/internal/trajectory"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// Trajectories are scoped by project as on `dsec server` (the guard under the
// trajectory decorator, the real HTTP layer): another project's trajectory
// cannot be listed, read, exported, deleted, rebuilt or replayed into; a step
// naming its ID starts the caller's own trajectory.
func TestTrajectoriesScopedByProject(t *testing.T) {
	ctx := context.Background()
	node := agenttest.NewNode(t)
	st, err := project.OpenLocal("", admin)
	if err != nil {
		t.Fatal(err)
	}
	g := project.NewGuard(node, st, nil)
	traj := trajectory.Wrap(g, trajectory.NewMem(), trajectory.Options{})
	ts := httptest.NewServer(openapitest.Wrap(t, v1.New(traj, v1.Options{Projects: g, Steps: true}).Handler()))
	defer ts.Close()
	cl := func(tok string) *client.Client { return client.New(ts.URL, tok, client.WithRetry(0)) }
	adm := cl(admin)
	pa, err := adm.CreateProject(ctx, "a", api.Quota{})
	if err != nil {
		t.Fatal(err)
	}
	pb, err := adm.CreateProject(ctx, "b", api.Quota{})
	if err != nil {
		t.Fatal(err)
	}
	ca, cb := cl(pa.Token), cl(pb.Token)
	sa, err := ca.Create(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := cb.Create(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	secret := api.ExecRequest{Cmd: []string{"echo", "a-secret"}}
	if r, err := ca.Exec(client.WithTrajectory(ctx, "t1", 1), sa.ID, secret); err != nil || r.Stdout != "a-secret\n" {
		t.Fatalf("a's step: %+v %v", r, err)
	}
	if r, err := ca.Exec(client.WithTrajectory(ctx, "t1", 1), sa.ID, secret); err != nil || !r.Replayed {
		t.Fatalf("a's own replay: %+v %v", r, err)
	}

	// B sees nothing of it.
	if l, err := cb.ListTrajectories(ctx); err != nil || len(l) != 0 {
		t.Fatalf("b lists %+v (%v)", l, err)
	}
	if l, err := adm.ListTrajectories(ctx); err != nil || len(l) != 0 {
		t.Fatalf("the default project lists %+v (%v)", l, err)
	}
	if _, err := cb.GetTrajectory(ctx, "t1"); code(err) != api.CodeNotFound {
		t.Fatalf("b reads a's trajectory: %v", err)
	}
	if _, err := cb.ExportSteps(ctx, "t1"); code(err) != api.CodeNotFound {
		t.Fatalf("b exports a's trajectory: %v", err)
	}
	if _, err := cb.RebuildTrajectory(ctx, "t1"); code(err) != api.CodeNotFound {
		t.Fatalf("b rebuilds a's trajectory: %v", err)
	}
	if err := cb.DeleteTrajectory(ctx, "t1"); code(err) != api.CodeNotFound {
		t.Fatalf("b deletes a's trajectory: %v", err)
	}
	// Naming a's key itself is not a trajectory ID.
	req, _ := http.NewRequest(http.MethodGet, ts.URL+"/v1/trajectories/a%2Ft1", nil)
	req.Header.Set("Authorization", "Bearer "+admin)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("GET /v1/trajectories/a%%2Ft1 as admin: %v %v", resp.Status, err)
	}
	// A step of "t1" from B is B's own trajectory: it runs (no replay of a's
	// result); step 2 without B's step 1 would be a gap.
	if _, err := cb.Exec(client.WithTrajectory(ctx, "t2", 2), sb.ID, secret); code(err) != api.CodeInvalidArgument {
		t.Fatalf("b's step 2 of a new trajectory: %v", err)
	}
	mine := api.ExecRequest{Cmd: []string{"echo", "b-own"}}
	if r, err := cb.Exec(client.WithTrajectory(ctx, "t1", 1), sb.ID, mine); err != nil || r.Replayed || r.Stdout != "b-own\n" {
		t.Fatalf("b's step 1 of its own t1: %+v %v", r, err)
	}
	// B re-issuing a's exact step on a's deleted sandbox gets no answer from a's log.
	if err := ca.Delete(ctx, sa.ID); err != nil {
		t.Fatal(err)
	}
	if r, err := cb.Exec(client.WithTrajectory(ctx, "t3", 1), sa.ID, secret); err == nil || r.Stdout != "" {
		t.Fatalf("b replays into a deleted sandbox of a: %+v %v", r, err)
	}
	if r, err := cb.Exec(client.WithTrajectory(ctx, "t1", 2), sa.ID, secret); err == nil || r.Stdout != "" {
		t.Fatalf("b steps into a deleted sandbox of a: %+v %v", r, err)
	}
	// a's trajectory is intact and still replays (its sandbox is gone).
	tr, err := ca.GetTrajectory(ctx, "t1")
	if err != nil || tr.ID != "t1" || tr.StepCount != 1 || tr.Steps[0].Trajectory != "t1" {
		t.Fatalf("a's trajectory: %+v %v", tr, err)
	}
	if r, err := ca.Exec(client.WithTrajectory(ctx, "t1", 1), sa.ID, secret); err != nil || !r.Replayed || r.Stdout != "a-secret\n" {
		t.Fatalf("a's replay after the delete: %+v %v", r, err)
	}
	la, _ := ca.ListTrajectories(ctx)
	lb, _ := cb.ListTrajectories(ctx)
	if len(la) != 1 || la[0].ID != "t1" || len(lb) != 1 || lb[0].ID != "t1" || la[0].SandboxID == lb[0].SandboxID {
		t.Fatalf("lists: a %+v, b %+v", la, lb)
	}
	if err := cb.DeleteTrajectory(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.GetTrajectory(ctx, "t1"); err != nil {
		t.Fatalf("a's t1 after b deleted its own: %v", err)
	}
}
