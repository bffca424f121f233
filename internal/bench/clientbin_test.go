package bench

import (
	"os"
	"path/filepath"
	"testing"
)

// TestClientBinary: the CLI sides of a bench run from dsecd run the dsec
// beside it (dsecd has no client commands); any other binary is its own client.
func TestClientBinary(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"dsecd", "dsecd-race", "dsec-race", "other"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for bin, want := range map[string]string{
		"dsecd":      "dsecd", // no dsec beside it
		"dsecd-race": "dsec-race",
		"dsec-race":  "dsec-race",
		"other":      "other",
	} {
		if got := clientBinary(filepath.Join(dir, bin)); got != filepath.Join(dir, want) {
			t.Errorf("clientBinary(%s) = %s, want %s", bin, filepath.Base(got), want)
		}
	}
}
