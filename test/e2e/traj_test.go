package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

func stepCmd(k int) string {
	if k == 30 {
		return "sleep 5; echo 30 >> /root/f; echo step 30"
	}
	return fmt.Sprintf("echo %d >> /root/f; echo step %d", k, k)
}

func (n *node) step(t *testing.T, traj string, k int, id, shell string) (api.ExecResult, error) {
	t.Helper()
	ctx := client.WithTrajectory(context.Background(), traj, k)
	return n.cl.Exec(ctx, id, api.ExecRequest{Shell: shell, TimeoutMs: 60_000})
}

func apiCode(err error) api.Code {
	if e, ok := api.AsError(err); ok {
		return e.Code
	}
	return api.Code(fmt.Sprint(err))
}

// TestTrajectoryKillResume kills the server with SIGKILL while step 30 of a
// 50-step trajectory runs, restarts it and re-issues all 50 steps: 1-29 are
// replayed, 30 is outcome_unknown, 31-50 run live, and no step ran twice.
func TestTrajectoryKillResume(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	id := n.create(t, api.CreateSandboxRequest{})
	const traj = "kill-resume"
	for k := 1; k < 30; k++ {
		r, err := n.step(t, traj, k, id, stepCmd(k))
		if err != nil || r.ExitCode != 0 || r.Replayed {
			t.Fatalf("step %d: %+v %v", k, r, err)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := n.step(t, traj, 30, id, stepCmd(30))
		done <- err
	}()
	var st api.Trajectory
	var gerr error
	started := testwait.Until(10*time.Second, func() bool {
		st, gerr = n.cl.GetTrajectory(ctx, traj)
		if gerr == nil && st.LastStep == 30 {
			if st.Steps[29].State != api.StepStarted {
				t.Fatalf("step 30 state %s", st.Steps[29].State)
			}
			return true
		}
		return false
	})
	if !started {
		t.Fatalf("step 30 never started: %+v %v", st, gerr)
	}
	waitSandboxProc(t, id, true, "sleep", "5") // step 30's command runs in the sandbox
	n.stop(false)                              // kill -9 while `sleep 5` runs
	if err := <-done; err == nil {
		t.Fatal("step 30 answered although the server was killed")
	}
	n.start()

	for k := 1; k <= 50; k++ {
		r, err := n.step(t, traj, k, id, stepCmd(k))
		switch {
		case k < 30:
			if err != nil || !r.Replayed || r.Stdout != fmt.Sprintf("step %d\n", k) {
				t.Fatalf("step %d should be replayed: %+v %v", k, r, err)
			}
		case k == 30:
			if apiCode(err) != api.CodeOutcomeUnknown {
				t.Fatalf("step 30: want outcome_unknown, got %+v %v", r, err)
			}
			if e, _ := api.AsError(err); e.Status != 409 {
				t.Fatalf("outcome_unknown status %d", e.Status)
			}
		default:
			if err != nil || r.Replayed || r.ExitCode != 0 {
				t.Fatalf("step %d should run live: %+v %v", k, r, err)
			}
		}
	}
	// Once more: now 31-50 replay too.
	for _, k := range []int{1, 29, 31, 50} {
		if r, err := n.step(t, traj, k, id, stepCmd(k)); err != nil || !r.Replayed {
			t.Fatalf("second re-issue of step %d: %+v %v", k, r, err)
		}
	}
	waitSandboxProc(t, id, false, "sleep", "5") // the orphaned step 30 has finished if it still ran
	lines := strings.Fields(n.sh(t, id, "cat /root/f").Stdout)
	seen := map[string]int{}
	for _, l := range lines {
		seen[l]++
	}
	for k := 1; k <= 50; k++ {
		c := seen[fmt.Sprint(k)]
		if k == 30 {
			if c > 1 {
				t.Fatalf("step 30 ran %d times", c)
			}
			continue
		}
		if c != 1 {
			t.Fatalf("step %d ran %d times; file: %v", k, c, lines)
		}
	}
	t.Logf("file has %d lines (step 30's own line: %d)", len(lines), seen["30"])

	// A changed command at step k diverges at k, naming both fingerprints.
	_, err := n.step(t, traj, 17, id, "echo something else")
	e, ok := api.AsError(err)
	if !ok || e.Code != api.CodeTrajectoryDiverged || e.Status != 409 || !strings.Contains(e.Message, "step 17") ||
		strings.Count(e.Message, "sha256:") != 2 {
		t.Fatalf("diverged: %v", err)
	}
	// A gap is refused.
	if _, err := n.step(t, traj, 52, id, "true"); apiCode(err) != api.CodeInvalidArgument {
		t.Fatalf("gap: %v", err)
	}
	tr, err := n.cl.GetTrajectory(ctx, traj)
	if err != nil || tr.StepCount != 50 || tr.Steps[29].State != api.StepUnknown || tr.Steps[49].State != api.StepFinished {
		t.Fatalf("log: %+v %v", tr, err)
	}
}

// TestTrajectoryConcurrent runs 10 trajectories of 20 steps at once on 2
// sandboxes and checks that nothing mixes, live or replayed.
func TestTrajectoryConcurrent(t *testing.T) {
	n := startNode(t)
	ids := []string{n.create(t, api.CreateSandboxRequest{}), n.create(t, api.CreateSandboxRequest{})}
	const trajs, steps = 10, 20
	run := func(wantReplay bool) {
		var wg sync.WaitGroup
		errs := make(chan error, trajs)
		for g := range trajs {
			wg.Go(func() {
				for k := 1; k <= steps; k++ {
					r, err := n.step(t, fmt.Sprintf("conc-%d", g), k, ids[g%2],
						fmt.Sprintf("echo %d-%d | tee -a /root/log-%d", g, k, g))
					if err != nil || r.Replayed != wantReplay || r.Stdout != fmt.Sprintf("%d-%d\n", g, k) {
						errs <- fmt.Errorf("trajectory %d step %d: %+v %v", g, k, r, err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	run(false)
	run(true)
	for g := range trajs {
		got := n.sh(t, ids[g%2], fmt.Sprintf("cat /root/log-%d", g)).Stdout
		var want strings.Builder
		for k := 1; k <= steps; k++ {
			fmt.Fprintf(&want, "%d-%d\n", g, k)
		}
		if got != want.String() {
			t.Fatalf("log-%d: %q", g, got)
		}
	}
	// A step sent to the other sandbox is refused.
	if _, err := n.step(t, "conc-0", steps+1, ids[1], "true"); apiCode(err) != api.CodeConflict {
		t.Fatalf("wrong sandbox: %v", err)
	}
}

// TestTrajectoryLostAndRebuild loses a trajectory's sandbox, checks the error
// code, rebuilds it and goes on; it also drives the CLI.
func TestTrajectoryLostAndRebuild(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	sb, err := n.cl.Create(ctx, api.CreateSandboxRequest{Env: map[string]string{"GREETING": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	const traj = "lost"
	tctx := func(k int) context.Context { return client.WithTrajectory(ctx, traj, k) }
	if _, err := n.cl.WriteFile(tctx(1), sb.ID, "/root/data.txt", 0o600, strings.NewReader("payload\n")); err != nil {
		t.Fatal(err)
	}
	if err := n.cl.Mkdir(tctx(2), sb.ID, api.MkdirRequest{Path: "/root/d"}); err != nil {
		t.Fatal(err)
	}
	if r, err := n.step(t, traj, 3, sb.ID, "echo $GREETING >> /root/data.txt; cat /root/data.txt"); err != nil || r.Stdout != "payload\nhi\n" {
		t.Fatalf("step 3: %+v %v", r, err)
	}
	rc, err := n.cl.ReadFile(tctx(4), sb.ID, "/root/data.txt")
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()

	// The CLI: a replayed step prints the logged output and exits with the logged code.
	for i := range 2 {
		out, _, code := n.cli(t, "", "exec", "--traj", "cli", "--step", "1", sb.ID, "--", "sh", "-c", "echo x >> /root/cli; wc -l < /root/cli; exit 3")
		if strings.TrimSpace(out) != "1" || code != 3 {
			t.Fatalf("cli exec #%d: %q exit %d", i, out, code)
		}
	}
	if out, _, code := n.cli(t, "", "traj", "show", traj); code != 0 || !strings.Contains(out, "write_file") || !strings.Contains(out, "finished") {
		t.Fatalf("traj show: %d %s", code, out)
	}
	if out, _, code := n.cli(t, "", "traj", "export", traj); code != 0 || strings.Count(out, "\n") != 4 {
		t.Fatalf("traj export: %d %s", code, out)
	}

	if err := n.cl.Delete(ctx, sb.ID); err != nil { // the node "loses" it
		t.Fatal(err)
	}
	if r, err := n.step(t, traj, 3, sb.ID, "echo $GREETING >> /root/data.txt; cat /root/data.txt"); err != nil || !r.Replayed {
		t.Fatalf("replay after loss: %+v %v", r, err)
	}
	_, err = n.step(t, traj, 5, sb.ID, "cat /root/data.txt")
	if e, ok := api.AsError(err); !ok || e.Code != api.CodeTrajectorySandboxLost || e.Status != 410 || !e.Infrastructure || e.Retryable {
		t.Fatalf("want trajectory_sandbox_lost: %v", err)
	}
	out, _, code := n.cli(t, "", "traj", "rebuild", traj)
	if code != 0 || !strings.Contains(out, "3 steps re-executed, 0 mismatched") {
		t.Fatalf("rebuild: %d %s", code, out)
	}
	tr, err := n.cl.GetTrajectory(ctx, traj)
	if err != nil || tr.SandboxID == sb.ID || tr.Rebuilds != 1 {
		t.Fatalf("after rebuild: %+v %v", tr, err)
	}
	t.Cleanup(func() { _ = n.cl.Delete(ctx, tr.SandboxID) })
	r, err := n.step(t, traj, 5, tr.SandboxID, "cat /root/data.txt; ls -d /root/d")
	if err != nil || r.Replayed || r.Stdout != "payload\nhi\n/root/d\n" {
		t.Fatalf("step 5 on the rebuilt sandbox: %+v %v", r, err)
	}
	if _, _, code := n.cli(t, "", "traj", "rm", traj); code != 0 {
		t.Fatal("traj rm failed")
	}
	if _, err := n.cl.GetTrajectory(ctx, traj); !errors.Is(err, &api.Error{Code: api.CodeNotFound}) {
		t.Fatalf("after rm: %v", err)
	}
}
