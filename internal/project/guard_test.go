package project_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/internal/frontend/v1/openapitest"
	"github.com/dsec-dev/dsec/internal/project"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

const admin = "admin-token-0123456789"

// guarded serves a node (agent over the mock driver) through the guard and the real HTTP layer.
func guarded(t *testing.T) (*agenttest.Node, *project.Guard, func(tok string) *client.Client) {
	t.Helper()
	node := agenttest.NewNode(t)
	g, ts := serveGuard(t, node, nil)
	return node, g, func(tok string) *client.Client { return client.New(ts.URL, tok, client.WithRetry(0)) }
}

// serveGuard serves inner through a guard (on an in-memory store, logging to
// log) and the real HTTP layer, checked against the OpenAPI document.
func serveGuard(t *testing.T, inner session.Service, log *slog.Logger) (*project.Guard, *httptest.Server) {
	t.Helper()
	st, err := project.OpenLocal("", admin)
	if err != nil {
		t.Fatal(err)
	}
	g := project.NewGuard(inner, st, log)
	ts := httptest.NewServer(openapitest.Wrap(t, v1.New(g, v1.Options{Projects: g, Logger: log}).Handler()))
	t.Cleanup(ts.Close)
	return g, ts
}

// projectsAB creates projects a (quota qa) and b (none) and returns clients
// with the admin's, a's and b's tokens.
func projectsAB(t *testing.T, cl func(tok string) *client.Client, qa api.Quota) (adm, ca, cb *client.Client) {
	t.Helper()
	adm = cl(admin)
	a, err := adm.CreateProject(context.Background(), "a", qa)
	if err != nil {
		t.Fatal(err)
	}
	b, err := adm.CreateProject(context.Background(), "b", api.Quota{})
	if err != nil {
		t.Fatal(err)
	}
	return adm, cl(a.Token), cl(b.Token)
}

func code(err error) api.Code {
	if e, ok := api.AsError(err); ok {
		return e.Code
	}
	return ""
}

func TestGuardQuotaAndScope(t *testing.T) {
	ctx := context.Background()
	node, _, cl := guarded(t)
	adm, ca, cb := projectsAB(t, cl, api.Quota{MaxSandboxes: 2})
	s1, err := ca.Create(ctx, api.CreateSandboxRequest{Labels: map[string]string{api.LabelProject: "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if s1.Labels[api.LabelProject] != "a" {
		t.Fatalf("a caller chose its own project label: %v", s1.Labels)
	}
	if _, err := ca.Create(ctx, api.CreateSandboxRequest{}); err != nil {
		t.Fatal(err)
	}
	before := len(node.Creates())
	_, err = ca.Create(ctx, api.CreateSandboxRequest{})
	if code(err) != api.CodeQuotaExceeded || !strings.Contains(err.Error(), "max_sandboxes") {
		t.Fatalf("third create: %v", err)
	}
	if e, _ := api.AsError(err); e.Status != 429 || e.Infrastructure {
		t.Fatalf("status %d infrastructure %v", e.Status, e.Infrastructure)
	}
	if len(node.Creates()) != before {
		t.Fatal("the refused create reached the node")
	}

	// B sees and touches nothing of A's.
	if _, err := cb.Get(ctx, s1.ID); code(err) != api.CodeNotFound {
		t.Fatalf("B gets A's sandbox: %v", err)
	}
	if _, err := cb.Exec(ctx, s1.ID, api.ExecRequest{Cmd: []string{"true"}}); code(err) != api.CodeNotFound {
		t.Fatalf("B execs in A's sandbox: %v", err)
	}
	if err := cb.Delete(ctx, s1.ID); code(err) != api.CodeNotFound {
		t.Fatalf("B deletes A's sandbox: %v", err)
	}
	if l, _ := cb.List(ctx); len(l) != 0 {
		t.Fatalf("B lists %d sandboxes", len(l))
	}
	if l, _ := ca.List(ctx); len(l) != 2 {
		t.Fatalf("A lists %d sandboxes", len(l))
	}
	if l, _ := adm.List(ctx); len(l) != 0 {
		t.Fatalf("the default project lists %d sandboxes", len(l))
	}
	if _, err := ca.Projects(ctx); code(err) != api.CodePermissionDenied {
		t.Fatalf("A administers projects: %v", err)
	}
	if err := adm.DeleteProject(ctx, "a"); code(err) != api.CodeConflict {
		t.Fatalf("deleting a project with sandboxes: %v", err)
	}

	// A delete frees a slot.
	if err := ca.Delete(ctx, s1.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Create(ctx, api.CreateSandboxRequest{}); err != nil {
		t.Fatal("after a delete:", err)
	}
	p, _ := adm.Project(ctx, "a")
	if p.Usage.Sandboxes != 2 || p.Usage.CPU != 2 {
		t.Fatalf("usage %+v", p.Usage)
	}
	// The default project's sandboxes look as before projects: no labels added,
	// and a caller's own dsec.project is dropped.
	d, err := adm.Create(ctx, api.CreateSandboxRequest{Labels: map[string]string{"k": "v", api.LabelProject: "a"}})
	if err != nil || len(d.Labels) != 1 || d.Labels["k"] != "v" {
		t.Fatalf("default project's labels: %v %v", d.Labels, err)
	}
	if _, err := ca.Get(ctx, d.ID); code(err) != api.CodeNotFound {
		t.Fatalf("A gets a sandbox planted with its label: %v", err)
	}
	if _, err := cl("nope-nope-nope").List(ctx); code(err) != api.CodeUnauthorized {
		t.Fatalf("unknown token: %v", err)
	}
}

func TestGuardReconcile(t *testing.T) {
	ctx := context.Background()
	node, g, cl := guarded(t)
	adm := cl(admin)
	a, err := adm.CreateProject(ctx, "a", api.Quota{})
	if err != nil {
		t.Fatal(err)
	}
	ca := cl(a.Token)
	var ids []string
	for range 3 {
		sb, err := ca.Create(ctx, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	// Made without a quota: nothing reserved. Setting one counts them at once.
	p, err := adm.SetQuota(ctx, "a", api.Quota{MaxSandboxes: 3})
	if err != nil || p.Usage.Sandboxes != 3 {
		t.Fatalf("set-quota: %+v %v", p.Usage, err)
	}
	if _, err := ca.Create(ctx, api.CreateSandboxRequest{}); code(err) != api.CodeQuotaExceeded {
		t.Fatalf("a fourth: %v", err)
	}
	// A sandbox that ends without a delete through the API (TTL, a lost node):
	// the reconciler gives its slot back once its reservation is past the grace.
	if err := node.Delete(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := g.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if p, _ := adm.Project(ctx, "a"); p.Usage.Sandboxes != 3 {
		t.Fatalf("within the grace: %+v", p.Usage)
	}
	g.Grace = 0
	if err := g.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if p, _ := adm.Project(ctx, "a"); p.Usage.Sandboxes != 2 {
		t.Fatalf("after reconcile: %+v", p.Usage)
	}
	sb, err := ca.Create(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// A create whose reservation was released although the node made it (an
	// answer lost on the way) is adopted again.
	if err := g.Store().Release(ctx, "a", sb.Labels[api.LabelReservation], project.Usage{Sandboxes: 1, MilliCPU: 1000, MemoryBytes: 512 << 20}); err != nil {
		t.Fatal(err)
	}
	if p, _ := adm.Project(ctx, "a"); p.Usage.Sandboxes != 2 {
		t.Fatalf("after the release: %+v", p.Usage)
	}
	g.Grace = time.Hour
	if err := g.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if p, _ := adm.Project(ctx, "a"); p.Usage.Sandboxes != 3 {
		t.Fatalf("after adopting: %+v", p.Usage)
	}
	if !errdefs.Is(g.Authorize(ctx, sb.ID), api.CodeNotFound) {
		t.Fatal("the default project owns A's sandbox")
	}
}
