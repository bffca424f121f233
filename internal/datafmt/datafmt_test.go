package datafmt

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckDir(t *testing.T) {
	dir := t.TempDir()
	// A directory without a marker (new, or of a build before markers) gets one.
	if err := CheckDir(dir, NodeDir); err != nil {
		t.Fatal(err)
	}
	var m Marker
	b, err := os.ReadFile(filepath.Join(dir, MarkerFile))
	if err != nil || json.Unmarshal(b, &m) != nil || m.Format != NodeDir {
		t.Fatalf("marker %q %v", b, err)
	}
	if err := CheckDir(dir, NodeDir); err != nil {
		t.Fatalf("reopen: %v", err)
	}

	// A later dsec's directory is refused and left exactly as it is.
	newer := []byte(`{"format": 7, "written_by": "dsec abcdef012345"}`)
	if err := os.WriteFile(filepath.Join(dir, MarkerFile), newer, 0o600); err != nil {
		t.Fatal(err)
	}
	err = CheckDir(dir, NodeDir)
	if !errors.Is(err, ErrNewer) || !strings.Contains(err.Error(), "format 7") || !strings.Contains(err.Error(), "abcdef012345") {
		t.Fatalf("newer data dir: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, MarkerFile)); string(b) != string(newer) {
		t.Errorf("a refused marker was rewritten: %q", b)
	}

	// A marker that is not one is refused, not replaced.
	if err := os.WriteFile(filepath.Join(dir, MarkerFile), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CheckDir(dir, NodeDir); err == nil || !strings.Contains(err.Error(), "unreadable") {
		t.Errorf("garbage marker: %v", err)
	}
}
