package project_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/dsec-dev/dsec/internal/project"
	"github.com/dsec-dev/dsec/internal/project/projecttest"
	"github.com/dsec-dev/dsec/pkg/api"
)

func TestLocalConformance(t *testing.T) {
	projecttest.Run(t, func(t *testing.T) projecttest.Stores {
		const admin = "admin-token-0123456789"
		l, err := project.OpenLocal(filepath.Join(t.TempDir(), "projects.json"), admin)
		if err != nil {
			t.Fatal(err)
		}
		return projecttest.Stores{A: l, B: l, AdminToken: admin}
	})
}

// Registry credentials persist in the state file (mode 0600) and are read
// back by the next `dsec server`.
func TestLocalRegistryAuthPersists(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "projects.json")
	l, err := project.OpenLocal(file, "admin-token-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Create(ctx, "team-a", project.Quota{}); err != nil {
		t.Fatal(err)
	}
	a := api.RegistryAuth{Username: "robot", Password: "s3cret"}
	if err := l.SetRegistryAuth(ctx, "team-a", "ghcr.io", a); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s has mode %v, want 0600", file, fi.Mode().Perm())
	}
	again, err := project.OpenLocal(file, "admin-token-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	if got := again.RegistryAuth("team-a")["ghcr.io"]; got != a {
		t.Fatalf("after reopening: %v", got)
	}
}
