package project_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/auth"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// rawGet is the body of an admin GET, as any HTTP client sees it.
func rawGet(t *testing.T, url, path string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url+path, nil)
	req.Header.Set("Authorization", "Bearer "+admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	return string(b)
}

// A project's registry credentials reach the node with its creates (not with
// another project's), a caller's own win for their hosts, and no answer or
// log line carries the password.
func TestGuardRegistryAuth(t *testing.T) {
	ctx := context.Background()
	var logs bytes.Buffer // slog's handler locks its writes; read after the server closed
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	node := agenttest.NewNode(t)
	g, ts := serveGuard(t, batchNode{node}, log)
	url := ts.URL
	cl := func(tok string) *client.Client { return client.New(url, tok, client.WithRetry(0)) }
	adm, ca, cb := projectsAB(t, cl, api.Quota{MaxSandboxes: 10})
	const secret = "pw-0f7c1e9d-never-shown"
	ghcr := api.RegistryAuth{Username: "robot", Password: secret}
	p, err := adm.SetProjectRegistryAuth(ctx, "a", "ghcr.io", ghcr)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.Registries, []string{"ghcr.io"}) {
		t.Fatalf("the answer's registries: %v", p.Registries)
	}
	hub := api.RegistryAuth{Username: "hubuser", Password: secret + "-hub"}
	if _, err := adm.SetProjectRegistryAuth(ctx, "a", "index.docker.io", hub); err != nil {
		t.Fatal(err)
	}

	// What a user reads: hosts only.
	for _, path := range []string{"/v1/projects", "/v1/projects/a"} {
		body := rawGet(t, url, path)
		if strings.Contains(body, secret) || strings.Contains(body, "robot") || !strings.Contains(body, `"registries":["docker.io","ghcr.io"]`) {
			t.Fatalf("GET %s shows %s", path, body)
		}
	}

	// A's creates carry A's credentials to the node; B's and default's none.
	if _, err := ca.Create(ctx, api.CreateSandboxRequest{}); err != nil {
		t.Fatal(err)
	}
	want := map[string]api.RegistryAuth{"ghcr.io": ghcr, "docker.io": hub}
	last := func() api.CreateSandboxRequest { c := node.Creates(); return c[len(c)-1] }
	if got := last().RegistryAuth; !reflect.DeepEqual(got, want) {
		t.Fatalf("A's create reached the node with %v, want %v", got, want)
	}
	if _, err := cb.Create(ctx, api.CreateSandboxRequest{}); err != nil {
		t.Fatal(err)
	}
	if got := last().RegistryAuth; got != nil {
		t.Fatalf("B's create reached the node with A's credentials: %v", got)
	}
	if _, err := adm.Create(ctx, api.CreateSandboxRequest{}); err != nil {
		t.Fatal(err)
	}
	if got := last().RegistryAuth; got != nil {
		t.Fatalf("default's create reached the node with A's credentials: %v", got)
	}
	n := len(node.Creates())
	if _, err := ca.CreateBatch(ctx, []api.CreateSandboxRequest{{}, {}}); err != nil {
		t.Fatal(err)
	}
	for i, c := range node.Creates()[n:] {
		if !reflect.DeepEqual(c.RegistryAuth, want) {
			t.Fatalf("batch member %d reached the node with %v", i, c.RegistryAuth)
		}
	}

	// A caller's own credentials win for their host (by any of its names);
	// the project's fill in the others; the caller's map is left as it was.
	own := api.RegistryAuth{Username: "mine", Password: "my-own"}
	req := api.CreateSandboxRequest{RegistryAuth: map[string]api.RegistryAuth{"Registry-1.Docker.IO": own}}
	if _, err := g.Create(auth.WithProject(ctx, "a"), req); err != nil {
		t.Fatal(err)
	}
	if got, w := last().RegistryAuth, map[string]api.RegistryAuth{"Registry-1.Docker.IO": own, "ghcr.io": ghcr}; !reflect.DeepEqual(got, w) {
		t.Fatalf("with the caller's own: %v, want %v", got, w)
	}
	if len(req.RegistryAuth) != 1 {
		t.Fatalf("the caller's map was changed: %v", req.RegistryAuth)
	}
	batch := []api.CreateSandboxRequest{{RegistryAuth: map[string]api.RegistryAuth{"ghcr.io": own}}}
	if _, err := g.CreateBatch(auth.WithProject(ctx, "a"), batch); err != nil {
		t.Fatal(err)
	}
	if got, w := last().RegistryAuth, map[string]api.RegistryAuth{"ghcr.io": own, "docker.io": hub}; !reflect.DeepEqual(got, w) {
		t.Fatalf("batch with the caller's own: %v, want %v", got, w)
	}
	if len(batch[0].RegistryAuth) != 1 {
		t.Fatalf("the caller's batch was changed: %v", batch[0].RegistryAuth)
	}

	// Refusals, with stable codes.
	if _, err := ca.SetProjectRegistryAuth(ctx, "a", "ghcr.io", ghcr); code(err) != api.CodePermissionDenied {
		t.Fatalf("a non-default token sets credentials: %v", err)
	}
	if err := ca.RemoveProjectRegistryAuth(ctx, "a", "ghcr.io"); code(err) != api.CodePermissionDenied {
		t.Fatalf("a non-default token removes credentials: %v", err)
	}
	if _, err := adm.SetProjectRegistryAuth(ctx, "nobody", "ghcr.io", ghcr); code(err) != api.CodeNotFound {
		t.Fatalf("unknown project: %v", err)
	}
	if _, err := adm.SetProjectRegistryAuth(ctx, "a", "https://ghcr.io", ghcr); code(err) != api.CodeInvalidArgument {
		t.Fatalf("a URL for a host: %v", err)
	}
	if _, err := adm.SetProjectRegistryAuth(ctx, "a", "ghcr.io", api.RegistryAuth{Username: "u"}); code(err) != api.CodeInvalidArgument || !strings.Contains(err.Error(), "password") {
		t.Fatalf("no password: %v", err)
	}
	if e, _ := api.AsError(err); e != nil && e.Status != http.StatusBadRequest {
		t.Fatalf("status %d", e.Status)
	}

	// Removal: A's next create goes without.
	if err := adm.RemoveProjectRegistryAuth(ctx, "a", "ghcr.io"); err != nil {
		t.Fatal(err)
	}
	if err := adm.RemoveProjectRegistryAuth(ctx, "a", "ghcr.io"); code(err) != api.CodeNotFound {
		t.Fatalf("removing twice: %v", err)
	}
	if _, err := ca.Create(ctx, api.CreateSandboxRequest{}); err != nil {
		t.Fatal(err)
	}
	if got, w := last().RegistryAuth, map[string]api.RegistryAuth{"docker.io": hub}; !reflect.DeepEqual(got, w) {
		t.Fatalf("after the removal: %v, want %v", got, w)
	}
	if ps, err := adm.Projects(ctx); err != nil || !reflect.DeepEqual(ps[1].Registries, []string{"docker.io"}) {
		t.Fatalf("projects after the removal: %+v %v", ps, err)
	}

	ts.Close() // every request and its log line done
	l := logs.String()
	if strings.Contains(l, secret) || strings.Contains(l, "my-own") {
		t.Fatalf("a log line carries a password:\n%s", l)
	}
	if !strings.Contains(l, "ghcr.io") {
		t.Fatalf("the change was not logged:\n%s", l)
	}
}
