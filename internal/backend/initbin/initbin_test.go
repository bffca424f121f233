package initbin

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestInstall(t *testing.T) {
	if len(Bytes()) < 1024 || !bytes.HasPrefix(Bytes(), []byte("\x7fELF")) {
		t.Fatalf("embedded binary is not an ELF file (%d bytes)", len(Bytes()))
	}
	dir := filepath.Join(t.TempDir(), "bin")
	path, err := Install(dir)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(path) != Name() || len(Name()) != len("dsec-init-")+12 {
		t.Fatalf("unexpected path %s", path)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o755 || st.Size() != int64(len(Bytes())) {
		t.Fatalf("mode %v size %d", st.Mode(), st.Size())
	}
	again, err := Install(dir)
	if err != nil || again != path {
		t.Fatalf("second install: %q %v", again, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("leftover files: %v", entries)
	}
}
