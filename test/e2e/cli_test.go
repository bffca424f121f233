package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCLI(t *testing.T) {
	n := startNode(t)
	out, errs, code := n.cli(t, "", "create", "--memory", "256m", "--cpu", "0.5")
	id := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(id, "sb-") || strings.Contains(id, "\n") {
		t.Fatalf("create printed %q (stderr %q, exit %d)", out, errs, code)
	}
	defer n.cli(t, "", "rm", id)

	out, errs, code = n.cli(t, "", "exec", id, "--", "sh", "-c", "echo out; echo err >&2; exit 3")
	if code != 3 || out != "out\n" || errs != "err\n" {
		t.Fatalf("exec: %q %q exit %d", out, errs, code)
	}
	out, _, code = n.cli(t, "typed\n", "exec", "-i", id, "--", "cat")
	if code != 0 || out != "typed\n" {
		t.Fatalf("exec -i: %q exit %d", out, code)
	}
	out, _, _ = n.cli(t, "", "ls")
	if !strings.Contains(out, id) {
		t.Fatalf("ls: %q", out)
	}

	dir := t.TempDir()
	src := filepath.Join(dir, "in.txt")
	os.WriteFile(src, []byte("copied"), 0o644)
	if _, e, c := n.cli(t, "", "cp", src, id+":/root/in.txt"); c != 0 {
		t.Fatalf("cp up: %s", e)
	}
	if _, e, c := n.cli(t, "", "cp", id+":/root/in.txt", filepath.Join(dir, "back.txt")); c != 0 {
		t.Fatalf("cp down: %s", e)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "back.txt")); string(b) != "copied" {
		t.Fatalf("round trip %q", b)
	}
	os.MkdirAll(filepath.Join(dir, "tree", "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "tree", "sub", "f"), []byte("deep"), 0o644)
	if _, e, c := n.cli(t, "", "cp", filepath.Join(dir, "tree"), id+":/root/tree"); c != 0 {
		t.Fatalf("cp dir up: %s", e)
	}
	if out, _, _ := n.cli(t, "", "exec", id, "--", "cat", "/root/tree/sub/f"); out != "deep" {
		t.Fatalf("dir upload: %q", out)
	}

	if _, e, c := n.cli(t, "", "rm", id); c != 0 {
		t.Fatalf("rm: %s", e)
	}
	if _, e, c := n.cli(t, "", "exec", id, "--", "true"); c == 0 || !strings.Contains(e, "not_found") {
		t.Fatalf("exec after rm: exit %d %q", c, e)
	}
}
