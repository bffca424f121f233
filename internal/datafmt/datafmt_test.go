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

func TestCheckNumber(t *testing.T) {
	if err := CheckNumber("store", []byte("1"), 1); err != nil {
		t.Errorf("current format: %v", err)
	}
	if err := CheckNumber("store", []byte("2"), 1); !errors.Is(err, ErrNewer) {
		t.Errorf("later format: %v", err)
	}
	for _, bad := range []string{"", "x", "0", "-3"} {
		if err := CheckNumber("store", []byte(bad), 1); err == nil || errors.Is(err, ErrNewer) {
			t.Errorf("format %q: %v, want a refusal that is not ErrNewer", bad, err)
		}
	}
}
