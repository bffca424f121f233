package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// timed runs the dsec CLI under coreutils `timeout` (as a user would bound
// it) and returns its output, exit code and how long it took.
func (n *node) timed(t *testing.T, timeoutArgs []string, args ...string) (string, string, int, time.Duration) {
	t.Helper()
	cmd := exec.Command("timeout", append(append(timeoutArgs, binPath), args...)...)
	cmd.Env = append(os.Environ(), "DSEC_ADDR=http://"+n.addr, "DSEC_TOKEN="+n.token)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run timeout dsec %v: %v", args, err)
	}
	return out.String(), errb.String(), code, took
}

// A step that diverged is refused at once (409 before the server reads the
// stream), and the CLI says so and ends: it used to hang for ever.
func TestCLIDivergedStepEnds(t *testing.T) {
	n := startNode(t)
	id := n.create(t, api.CreateSandboxRequest{Image: "debian"})
	if out, errs, code := n.cli(t, "", "exec", "--traj", "div", "--step", "1", id, "--", "echo", "one"); code != 0 || out != "one\n" {
		t.Fatalf("step 1: %d %q %q", code, out, errs)
	}
	for _, extra := range [][]string{nil, {"-t"}, {"-i"}} {
		args := append(append([]string{"exec"}, extra...), "--traj", "div", "--step", "1", id, "--", "echo", "other")
		_, errs, code, took := n.timed(t, []string{"20"}, args...)
		if code != 1 || !strings.Contains(errs, "diverge") || took > 10*time.Second {
			t.Fatalf("dsec %v on a diverged step: exit %d after %v, stderr %q (want 1 with the divergence, promptly)", args, code, took, errs)
		}
	}
}

// SIGTERM (here from `timeout`) goes to the running command first; a command
// that ignores it is given up on after the grace and dsec still ends.
func TestCLISIGTERMEnds(t *testing.T) {
	n := startNode(t)
	id := n.create(t, api.CreateSandboxRequest{Image: "debian"})
	// The command sees the signal: its trap runs and its exit code is dsec's.
	out, errs, code, took := n.timed(t, []string{"--preserve-status", "-s", "TERM", "2"},
		"exec", id, "--", "sh", "-c", `trap 'echo got TERM; exit 7' TERM; echo ready; sleep 100 & wait`)
	if code != 7 || out != "ready\ngot TERM\n" || took > 8*time.Second {
		t.Fatalf("forwarded SIGTERM: exit %d after %v, out %q err %q (want 7, the trap's output)", code, took, out, errs)
	}
	// Plain `timeout`: 124 once dsec ended.
	if _, errs, code, took := n.timed(t, []string{"2"}, "exec", id, "--", "sleep", "100"); code != 124 || took > 8*time.Second {
		t.Fatalf("timeout 2 dsec exec sleep: exit %d after %v, err %q", code, took, errs)
	}
	// A command that ignores SIGTERM: dsec gives up 2 s later with 128+15.
	for _, extra := range [][]string{nil, {"-t"}} {
		args := append(append([]string{"exec"}, extra...), id, "--", "sh", "-c", `trap '' TERM; sleep 100`)
		_, errs, code, took := n.timed(t, []string{"--preserve-status", "-s", "TERM", "2"}, args...)
		if code != 143 || !strings.Contains(errs, "gave up") || took < 3500*time.Millisecond || took > 9*time.Second {
			t.Fatalf("dsec %v ignoring SIGTERM: exit %d after %v, err %q (want 143 after the 2 s grace)", args, code, took, errs)
		}
	}
	// Nothing of those commands is left running in the sandbox (seen from the
	// host: the image has no ps).
	waitSandboxProc(t, id, false, "sleep", "100")
}

// The CLI's exit codes a script relies on: 124 when the command timed out,
// 137 when it was killed (SIGKILL, or the kernel for memory: then dsec says
// so), 75 (EX_TEMPFAIL) when the infrastructure failed (no server).
func TestCLIExitCodes(t *testing.T) {
	n := startNode(t)
	id := n.create(t, api.CreateSandboxRequest{Image: "debian", MemoryBytes: 64 << 20})
	if _, errs, code := n.cli(t, "", "exec", "--timeout", "1s", id, "--", "sleep", "30"); code != 124 || !strings.Contains(errs, "timed out") {
		t.Errorf("--timeout: exit %d, stderr %q; want 124", code, errs)
	}
	if _, errs, code := n.cli(t, "", "exec", id, "--", "sh", "-c", "kill -9 $$"); code != 137 {
		t.Errorf("SIGKILL: exit %d, stderr %q; want 137", code, errs)
	}
	if _, errs, code := n.cli(t, "", "exec", id, "--", "sh", "-c", `x=$(head -c 256m /dev/zero | tr '\0' a); echo ${#x}`); code != 137 || !strings.Contains(errs, "out of memory") {
		t.Errorf("out of memory: exit %d, stderr %q; want 137 and the reason", code, errs)
	}
	if _, _, code := n.cli(t, "", "exec", id, "--", "sh", "-c", "exit 3"); code != 3 {
		t.Errorf("exit 3: exit %d", code)
	}
	// Nothing listens here: the request fails before any answer.
	cmd := exec.Command(binPath, "exec", id, "--", "true")
	cmd.Env = append(os.Environ(), "DSEC_ADDR=http://"+freePort(t), "DSEC_TOKEN=x")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 75 {
		t.Errorf("no server: %v, stderr %q; want exit 75", err, errb.String())
	}
}
