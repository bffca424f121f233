package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/internal/project"
	"github.com/dsec-dev/dsec/pkg/api"
)

// `dsec project registry set NAME HOST --username U --password-stdin` stores
// the credentials with the password from stdin; `dsec project ls` shows the
// hosts, never the password; `registry rm` removes them.
func TestProjectRegistryCLI(t *testing.T) {
	const admin = "admin-token-0123456789"
	node := agenttest.NewNode(t)
	st, err := project.OpenLocal("", admin)
	if err != nil {
		t.Fatal(err)
	}
	g := project.NewGuard(node, st, nil)
	srv := httptest.NewServer(v1.New(g, v1.Options{Projects: g}).Handler())
	defer srv.Close()
	t.Setenv("DSEC_ADDR", srv.URL)
	t.Setenv("DSEC_TOKEN", admin)
	ctx := context.Background()
	if _, err := st.Create(ctx, "team-a", project.Quota{}); err != nil {
		t.Fatal(err)
	}
	run := func(stdin string, args ...string) (string, error) {
		var out bytes.Buffer
		c := projectCmd()
		c.SetArgs(args)
		c.SetIn(strings.NewReader(stdin))
		c.SetOut(&out)
		c.SetContext(ctx)
		c.SilenceUsage, c.SilenceErrors = true, true
		err := c.Execute()
		return out.String(), err
	}
	const secret = "s3cret-from-stdin"
	out, err := run(secret+"\n", "registry", "set", "team-a", "ghcr.io", "--username", "robot", "--password-stdin")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, secret) || !strings.Contains(out, "REGISTRIES") || !strings.Contains(out, "ghcr.io") {
		t.Fatalf("set printed:\n%s", out)
	}
	if got := st.RegistryAuth("team-a")["ghcr.io"]; got != (api.RegistryAuth{Username: "robot", Password: secret}) {
		t.Fatalf("stored %q/%q", got.Username, got.Password)
	}
	if _, err := run(secret, "registry", "set", "team-a", "ghcr.io", "--username", "robot"); err == nil || !strings.Contains(err.Error(), "--password-stdin") {
		t.Fatalf("without --password-stdin: %v", err)
	}
	if _, err := run("", "registry", "set", "team-a", "ghcr.io", "--username", "robot", "--password-stdin"); err == nil {
		t.Fatal("an empty stdin was taken as a password")
	}
	for _, args := range [][]string{{"ls"}, {"ls", "--json"}} {
		out, err := run("", args...)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, secret) || !strings.Contains(out, "ghcr.io") {
			t.Fatalf("%v printed:\n%s", args, out)
		}
	}
	if _, err := run("", "registry", "rm", "team-a", "ghcr.io"); err != nil {
		t.Fatal(err)
	}
	if st.RegistryAuth("team-a") != nil {
		t.Fatal("registry rm left the credentials")
	}
	if _, err := run("", "registry", "rm", "team-a", "ghcr.io"); err == nil || !strings.Contains(err.Error(), "not_found") && !strings.Contains(err.Error(), "no credentials") {
		t.Fatalf("removing twice: %v", err)
	}
}
