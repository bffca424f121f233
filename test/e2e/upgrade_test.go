package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// upgradeFrom is the main commit whose node data directory TestUpgradeKeepsData
// writes before this tree's binary opens it: the main before the on-disk
// formats were versioned (data dirs without a marker, records without a
// version). DSEC_UPGRADE_FROM names another commit, DSEC_UPGRADE_FROM_BIN an
// already built dsec.
const upgradeFrom = "734381234984bd248cf6148bd14365561722b81d"

// oldBinary builds dsec at the commit to upgrade from (git archive of this
// repository, its C parts and the Go binary), cached by commit under the
// system's temporary directory.
func oldBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("DSEC_UPGRADE_FROM_BIN"); p != "" {
		return p
	}
	commit := envOr("DSEC_UPGRADE_FROM", upgradeFrom)
	out := filepath.Join(os.TempDir(), "dsec-upgrade-from-"+commit, "dsec")
	if _, err := os.Stat(out); err == nil {
		return out
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("upgrade: no git repository to build %s from: %v", commit, err)
	}
	repo := strings.TrimSpace(string(top))
	if err := exec.Command("git", "-C", repo, "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		t.Skipf("upgrade: commit %s is not in this clone's history (a shallow clone?)", commit)
	}
	src := t.TempDir()
	arch := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", repo, commit, src)
	if b, err := arch.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit, err, b)
	}
	tmp := out + ".tmp"
	build := exec.Command("sh", "-c", `make init >/dev/null && go build -o "$1" ./cmd/dsec`, "sh", tmp)
	build.Dir = src
	t.Logf("building dsec %s for the upgrade test", commit[:12])
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build dsec %s: %v\n%s", commit, err, b)
	}
	if err := os.Rename(tmp, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestUpgradeKeepsData: a node directory written by the previous main, with a
// sandbox running (a file written, a background process), a project and a
// trajectory step, is opened by this tree's server after a kill -9 of the old
// one: the sandbox is adopted with its file and process, the project and its
// token work, the step is answered from the log without running again, and the
// directory gets its format marker. A directory marked by a later dsec is
// refused at start with a message naming the format, and left as it is.
func TestUpgradeKeepsData(t *testing.T) {
	old := oldBinary(t)
	if skipAll != "" {
		t.Skip(skipAll)
	}
	dir, err := os.MkdirTemp("/var/lib", "dsec-e2e-upgrade-")
	if err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, dataDir: dir, addr: freePort(t), bin: old}
	t.Cleanup(func() {
		n.stop(true)
		os.RemoveAll(dir)
	})
	n.start()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	sb, err := n.cl.Create(ctx, api.CreateSandboxRequest{Labels: map[string]string{"task": "upgrade"}})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := n.cl.Exec(ctx, sb.ID, api.ExecRequest{Shell: "echo before-upgrade > /data.txt"}); err != nil || r.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", r, err)
	}
	proc, err := n.cl.StartProcess(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	proj, err := n.cl.CreateProject(ctx, "upgraded", api.Quota{MaxSandboxes: 3})
	if err != nil {
		t.Fatal(err)
	}
	step := client.WithTrajectory(ctx, "upgrade-traj", 1)
	first, err := n.cl.Exec(step, sb.ID, api.ExecRequest{Shell: "cat /proc/sys/kernel/random/uuid | tee -a /ran"})
	if err != nil || first.ExitCode != 0 {
		t.Fatalf("step 1: %+v %v", first, err)
	}
	n.stop(false) // kill -9: the sandbox lives on

	n.bin = ""
	n.start()
	got, err := n.cl.Get(ctx, sb.ID)
	if err != nil || got.Labels["task"] != "upgrade" {
		t.Fatalf("the old server's sandbox after the upgrade: %+v %v", got, err)
	}
	if r, err := n.cl.Exec(ctx, sb.ID, api.ExecRequest{Shell: "cat /data.txt"}); err != nil || r.Stdout != "before-upgrade\n" {
		t.Errorf("file written before the upgrade: %+v %v", r, err)
	}
	procs, err := n.cl.ListProcesses(ctx, sb.ID)
	if err != nil || len(procs) != 1 || procs[0].ID != proc.ID || !procs[0].Running {
		t.Errorf("background process after the upgrade: %+v %v", procs, err)
	}
	again, err := n.cl.Exec(step, sb.ID, api.ExecRequest{Shell: "cat /proc/sys/kernel/random/uuid | tee -a /ran"})
	if err != nil || !again.Replayed || again.Stdout != first.Stdout {
		t.Errorf("step 1 re-issued after the upgrade: %+v %v, want the logged answer %q", again, err, first.Stdout)
	}
	if r, err := n.cl.Exec(ctx, sb.ID, api.ExecRequest{Shell: "wc -l < /ran"}); err != nil || strings.TrimSpace(r.Stdout) != "1" {
		t.Errorf("the step ran again: %+v %v", r, err)
	}
	pc := client.New("http://"+n.addr, proj.Token)
	if _, err := pc.List(ctx); err != nil {
		t.Errorf("the project's token after the upgrade: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(n.dataDir, "format.json")); err != nil || !strings.Contains(string(b), `"format":1`) {
		t.Errorf("format marker after the upgrade: %q %v", b, err)
	}
	n.deleteAllParallel(t, ctx)
	n.stop(true)

	// A later dsec's directory: refused, untouched.
	later := []byte(`{"format":99,"written_by":"dsec 0123456789ab"}`)
	marker := filepath.Join(n.dataDir, "format.json")
	if err := os.WriteFile(marker, later, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binPath, "server", "--listen", freePort(t), "--data-dir", n.dataDir)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).ExitStatus() == 0 || !strings.Contains(string(out), "format 99") {
		t.Errorf("server on a data dir of format 99: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(marker); string(b) != string(later) {
		t.Errorf("the refused marker was rewritten: %q", b)
	}
	_ = os.Remove(marker)
}
