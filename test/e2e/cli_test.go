package e2e

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/testwait"
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

// TestCLIRun: `dsec run` creates a sandbox, runs the command with the
// sandbox's environment streaming its output, exits with its code, and with
// --rm leaves nothing behind; without --rm the sandbox stays and stderr names
// it. Malformed flags are refused before anything is created, and a missing
// image creates nothing.
func TestCLIRun(t *testing.T) {
	n := startNode(t)
	count := func() int {
		out, _, _ := n.cli(t, "", "ls")
		return strings.Count(out, "sb-")
	}
	out, errs, code := n.cli(t, "", "run", "--rm", "-e", "K=V", "--memory", "256m", "--", "sh", "-c", "echo out $K; echo err >&2; exit 3")
	if code != 3 || out != "out V\n" || errs != "err\n" {
		t.Fatalf("run --rm: %q %q exit %d", out, errs, code)
	}
	if c := count(); c != 0 {
		t.Fatalf("run --rm left %d sandboxes", c)
	}
	out, _, code = n.cli(t, "typed\n", "run", "--rm", "-i", "--", "cat")
	if code != 0 || out != "typed\n" {
		t.Fatalf("run -i: %q exit %d", out, code)
	}
	out, errs, code = n.cli(t, "", "run", "-w", "/tmp", "--", "sh", "-c", "pwd; touch kept")
	if code != 0 || out != "/tmp\n" || !strings.Contains(errs, "sb-") {
		t.Fatalf("run without --rm: %q %q exit %d", out, errs, code)
	}
	id := strings.Fields(errs[strings.Index(errs, "sb-"):])[0]
	if out, _, code := n.cli(t, "", "exec", id, "--", "ls", "/tmp/kept"); code != 0 || out != "/tmp/kept\n" {
		t.Fatalf("the kept sandbox %s: %q exit %d", id, out, code)
	}
	n.cli(t, "", "rm", id)
	for _, args := range [][]string{
		{"run", "--rm", "--memory", "12q", "--", "true"},
		{"run", "--rm", "--size", "80x24", "--", "true"},
		{"run", "--rm", "--timeout", "soon", "--", "true"},
		{"run", "--rm", "--image", "no-such-image", "--", "true"},
	} {
		if _, errs, code := n.cli(t, "", args...); code == 0 || errs == "" {
			t.Errorf("%v: exit %d %q, want refused", args, code, errs)
		}
	}
	if c := count(); c != 0 {
		t.Fatalf("refused runs left %d sandboxes", c)
	}

	// Ctrl-C: the command gets SIGINT, and --rm still deletes the sandbox.
	cmd := exec.Command(binPath, "run", "--rm", "--", "sh", "-c", "echo up; exec sleep 60")
	cmd.Env = append(os.Environ(), "DSEC_ADDR=http://"+n.addr, "DSEC_TOKEN="+n.token)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if line != "up\n" {
		_ = cmd.Process.Kill()
		t.Fatalf("run printed %q", line)
	}
	_ = cmd.Process.Signal(os.Interrupt)
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
		t.Fatalf("run after Ctrl-C: %v, want exit 130", err)
	}
	if c := count(); c != 0 {
		t.Fatalf("run --rm left %d sandboxes after Ctrl-C", c)
	}

	// dsec itself killed: the server still deletes the sandbox of --rm.
	cmd = exec.Command(binPath, "run", "--rm", "--", "sh", "-c", "echo up; exec sleep 60")
	cmd.Env = append(os.Environ(), "DSEC_ADDR=http://"+n.addr, "DSEC_TOKEN="+n.token)
	if stdout, err = cmd.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "up\n" {
		_ = cmd.Process.Kill()
		t.Fatalf("run printed %q", line)
	}
	if c := count(); c != 1 {
		t.Fatalf("%d sandboxes while run's command runs", c)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	testwait.For(t, 30*time.Second, "the sandbox of a killed dsec run --rm is deleted", func() bool { return count() == 0 })
}
