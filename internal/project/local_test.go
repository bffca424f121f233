package project_test

import (
	"path/filepath"
	"testing"

	"github.com/dsec-dev/dsec/internal/project"
	"github.com/dsec-dev/dsec/internal/project/projecttest"
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
