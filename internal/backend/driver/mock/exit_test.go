package mock_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/mock"
)

// TestExitInit: a sandbox whose init exits has its processes killed and its
// Done closed, keeps its root until it is destroyed, and is destroyed as any.
func TestExitInit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	host, dir := mock.NewHost(), t.TempDir()
	d, err := mock.New(mock.Config{Host: host, StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	in, err := d.Start(ctx, driver.Spec{ID: "sb"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := in.Exec(ctx, driver.ProcSpec{Args: []string{"sleep", "100"}, Cwd: "/"}, driver.Stdio{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if driver.Exited(in) {
		t.Fatal("exited before its init did")
	}
	if err := host.ExitInit(ctx, "sb"); err != nil {
		t.Fatal(err)
	}
	if !driver.Exited(in) {
		t.Fatal("Done is open after the init exited")
	}
	if ex, err := p.Wait(ctx); err != nil || ex.Code == 0 && ex.Signal == 0 {
		t.Fatalf("the sandbox's process survived its init: %+v %v", ex, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sb")); err != nil {
		t.Fatalf("the root went with the init: %v", err)
	}
	if err := in.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sb")); !os.IsNotExist(err) {
		t.Fatalf("root after destroy: %v", err)
	}
	if err := host.ExitInit(ctx, "sb"); err == nil {
		t.Fatal("ExitInit of a destroyed sandbox succeeded")
	}
}
