package blob_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/blob/blobtest"
)

func TestDirConformance(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blob.Store {
		s, err := blob.NewDir(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestPOSIXConformance(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blob.Store {
		s, err := blob.NewPOSIX(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// Two "nodes" sharing one mount: each has its own Store over the same directory.
func TestPOSIXTwoNodesNoTempLeft(t *testing.T) {
	dir := t.TempDir()
	blobtest.Run(t, func(t *testing.T) blob.Store {
		sub := filepath.Join(dir, t.Name())
		os.MkdirAll(sub, 0o755)
		a, _ := blob.NewPOSIX(sub)
		b, _ := blob.NewPOSIX(sub)
		return &alternating{a: a, b: b}
	})
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && filepath.Base(p)[0] == '.' && !fi.IsDir() {
			t.Errorf("temp file left: %s", p)
		}
		return nil
	})
}

func TestPOSIXMissingMount(t *testing.T) {
	if _, err := blob.NewPOSIX("/nonexistent/mount"); err == nil {
		t.Fatal("missing mount accepted")
	}
}

// A Put cut short by a kill leaves a temporary file; RemoveStaleTemp removes
// it, and leaves those of live writers and of other hosts.
func TestDirRemoveStaleTemp(t *testing.T) {
	dir := t.TempDir()
	s, err := blob.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	host = strings.ReplaceAll(host, "/", "_")
	name := func(h string, pid int) string {
		return filepath.Join(dir, "sha256", fmt.Sprintf(".tmp-%s-%d-0123456789abcdef", h, pid))
	}
	stale, live, other := name(host, dead.Process.Pid), name(host, os.Getpid()), name("elsewhere", dead.Process.Pid)
	for _, p := range []string{stale, live, other} {
		if err := os.WriteFile(p, []byte("half a blob"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.(interface{ RemoveStaleTemp() (int, error) }).RemoveStaleTemp()
	if err != nil || n != 1 {
		t.Fatalf("removed %d, %v; want 1", n, err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the dead writer's temp file is still there: %v", err)
	}
	for _, p := range []string{live, other} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s removed: %v", filepath.Base(p), err)
		}
	}
}
