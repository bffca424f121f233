// Package storetest is the conformance suite every trajectory.Store must pass.
package storetest

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/trajectory"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Factory opens a fresh store; Restart simulates a server restart on it (close
// and reopen the same data) and returns the new instance.
type Factory struct {
	Open    func(t *testing.T) trajectory.Store
	Restart func(t *testing.T, s trajectory.Store) trajectory.Store
}

func req(traj string, n int, fp string) trajectory.BeginRequest {
	return trajectory.BeginRequest{Trajectory: traj, N: n, Op: trajectory.OpExec, Fingerprint: fp,
		Args: []byte(`{"cmd":["x"]}`), SandboxID: "sb1", Create: api.CreateSandboxRequest{Image: "img"}}
}

func code(err error) api.Code {
	if e, ok := api.AsError(err); ok {
		return e.Code
	}
	if err != nil {
		return api.Code("other:" + err.Error())
	}
	return ""
}

func wantCode(t *testing.T, err error, c api.Code) {
	t.Helper()
	if code(err) != c {
		t.Fatalf("want %q, got %v", c, err)
	}
}

func live(t *testing.T, s trajectory.Store, r trajectory.BeginRequest) trajectory.Decision {
	t.Helper()
	d, err := s.Begin(context.Background(), r)
	if err != nil || d.Replay != nil {
		t.Fatalf("begin %s/%d: want live, got %+v %v", r.Trajectory, r.N, d, err)
	}
	return d
}

func finish(t *testing.T, s trajectory.Store, traj string, n int, body string) {
	t.Helper()
	b := []byte(body)
	if err := s.Finish(context.Background(), traj, n, trajectory.Result{Status: 200, Body: b,
		BodySize: int64(len(b)), BodySHA256: trajectory.SHA256(b), Header: map[string]string{"Content-Type": "application/json"}}, time.Now()); err != nil {
		t.Fatalf("finish %s/%d: %v", traj, n, err)
	}
}

// Run runs the suite.
func Run(t *testing.T, f Factory) {
	ctx := context.Background()
	t.Run("Rules", func(t *testing.T) {
		s := f.Open(t)
		wantCode(t, func() error { _, err := s.Begin(ctx, req("a", 2, "f1")); return err }(), api.CodeInvalidArgument)
		if d := live(t, s, req("a", 1, "f1")); !d.New {
			t.Fatal("first step should create the trajectory")
		}
		_, err := s.Begin(ctx, req("a", 1, "f1"))
		wantCode(t, err, api.CodeConflict) // in flight
		finish(t, s, "a", 1, `{"exit_code":0}`)
		d, err := s.Begin(ctx, req("a", 1, "f1"))
		if err != nil || d.Replay == nil || string(d.Replay.Result.Body) != `{"exit_code":0}` || d.Replay.Result.Status != 200 ||
			d.Replay.Result.Header["Content-Type"] != "application/json" {
			t.Fatalf("replay: %+v %v", d, err)
		}
		_, err = s.Begin(ctx, req("a", 1, "other"))
		wantCode(t, err, api.CodeTrajectoryDiverged)
		if e, _ := api.AsError(err); !bytes.Contains([]byte(e.Message), []byte("f1")) || !bytes.Contains([]byte(e.Message), []byte("other")) {
			t.Fatalf("diverged message should name both fingerprints: %s", e.Message)
		}
		_, err = s.Begin(ctx, req("a", 3, "f3"))
		wantCode(t, err, api.CodeInvalidArgument) // gap
		r := req("a", 2, "f2")
		r.SandboxID = "sb2"
		_, err = s.Begin(ctx, r)
		wantCode(t, err, api.CodeConflict) // another sandbox
		if err := s.Finish(ctx, "a", 2, trajectory.Result{Status: 200}, time.Now()); err == nil {
			t.Fatal("finish of a step never begun should fail")
		}
		live(t, s, req("a", 2, "f2"))
		finish(t, s, "a", 2, "two")
		meta, steps, err := s.Get(ctx, "a")
		if err != nil || meta.Last != 2 || meta.Count != 2 || len(steps) != 2 || steps[0].N != 1 || steps[1].N != 2 ||
			steps[1].State != api.StepFinished || meta.SandboxID != "sb1" || meta.Create.Image != "img" {
			t.Fatalf("get: %+v %+v %v", meta, steps, err)
		}
	})
	t.Run("Tally", func(t *testing.T) {
		s := f.Open(t)
		live(t, s, req("c", 1, "f1"))
		finish(t, s, "c", 1, "one")
		for _, d := range []trajectory.Tally{{Replays: 1}, {Divergences: 1}, {Replays: 1}} {
			if err := s.Tally(ctx, "c", d); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Tally(ctx, "none", trajectory.Tally{Replays: 1}); err != nil {
			t.Fatalf("tally of a trajectory that does not exist: %v", err)
		}
		s = f.Restart(t, s)
		meta, _, err := s.Get(ctx, "c")
		if err != nil || meta.Replays != 2 || meta.Divergences != 1 || meta.Count != 1 {
			t.Fatalf("after a restart: %+v %v", meta, err)
		}
		if list, err := s.List(ctx); err != nil || len(list) != 1 || list[0].Replays != 2 || list[0].Divergences != 1 {
			t.Fatalf("list: %+v %v", list, err)
		}
		if _, _, err := s.Get(ctx, "none"); code(err) != api.CodeNotFound {
			t.Fatalf("a tally created a trajectory: %v", err)
		}
	})
	t.Run("SandboxlessSteps", func(t *testing.T) {
		s := f.Open(t)
		fn := func(n int, fp string) trajectory.BeginRequest {
			r := req("fc", n, fp)
			r.Op, r.SandboxID, r.Create = trajectory.OpFnCall, "", api.CreateSandboxRequest{}
			return r
		}
		live(t, s, fn(1, "judge-1")) // a trajectory may start without a sandbox
		finish(t, s, "fc", 1, `{"verdict":"accepted"}`)
		if d, err := s.Begin(ctx, fn(1, "judge-1")); err != nil || d.Replay == nil {
			t.Fatalf("fncall replay: %+v %v", d, err)
		}
		live(t, s, req("fc", 2, "exec")) // the first sandbox step binds it
		finish(t, s, "fc", 2, "x")
		live(t, s, fn(3, "judge-2")) // fncall steps run whatever the sandbox
		finish(t, s, "fc", 3, "y")
		r := req("fc", 4, "exec2")
		r.SandboxID = "sb2"
		_, err := s.Begin(ctx, r)
		wantCode(t, err, api.CodeConflict) // bound to sb1 now
		meta, _, err := s.Get(ctx, "fc")
		if err != nil || meta.SandboxID != "sb1" || len(meta.Sandboxes) != 1 || meta.Create.Image != "img" || meta.Last != 3 {
			t.Fatalf("meta after binding: %+v %v", meta, err)
		}
	})
	t.Run("RestartUnknown", func(t *testing.T) {
		s := f.Open(t)
		live(t, s, req("r", 1, "f1"))
		finish(t, s, "r", 1, "one")
		live(t, s, req("r", 2, "f2")) // crash while it runs
		s = f.Restart(t, s)
		if d, err := s.Begin(ctx, req("r", 1, "f1")); err != nil || d.Replay == nil || string(d.Replay.Result.Body) != "one" {
			t.Fatalf("replay after restart: %+v %v", d, err)
		}
		_, err := s.Begin(ctx, req("r", 2, "f2"))
		wantCode(t, err, api.CodeOutcomeUnknown)
		_, err = s.Begin(ctx, req("r", 2, "f2x"))
		wantCode(t, err, api.CodeTrajectoryDiverged)
		if err := s.Finish(ctx, "r", 2, trajectory.Result{Status: 200}, time.Now()); err == nil {
			t.Fatal("finish of an interrupted step should fail")
		}
		live(t, s, req("r", 3, "f3"))
		finish(t, s, "r", 3, "three")
		_, steps, _ := s.Get(ctx, "r")
		if len(steps) != 3 || steps[1].State != api.StepUnknown || steps[2].State != api.StepFinished {
			t.Fatalf("states: %+v", steps)
		}
	})
	t.Run("Abort", func(t *testing.T) {
		s := f.Open(t)
		live(t, s, req("b", 1, "f1"))
		if err := s.Abort(ctx, "b", 1, trajectory.Rollback); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Get(ctx, "b"); code(err) != api.CodeNotFound {
			t.Fatalf("rolling back the only step should drop the trajectory: %v", err)
		}
		live(t, s, req("b", 1, "f1"))
		finish(t, s, "b", 1, "1")
		live(t, s, req("b", 2, "f2"))
		live(t, s, req("b", 3, "f3")) // concurrent steps are fine
		if err := s.Abort(ctx, "b", 3, trajectory.Rollback); err != nil {
			t.Fatal(err)
		}
		if err := s.Abort(ctx, "b", 2, trajectory.Rollback); err != nil {
			t.Fatal(err)
		}
		meta, _, _ := s.Get(ctx, "b")
		if meta.Last != 1 || meta.Count != 1 {
			t.Fatalf("after rollbacks: %+v", meta)
		}
		live(t, s, req("b", 2, "f2-again"))
		if err := s.Abort(ctx, "b", 2, trajectory.MarkUnknown); err != nil {
			t.Fatal(err)
		}
		_, err := s.Begin(ctx, req("b", 2, "f2-again"))
		wantCode(t, err, api.CodeOutcomeUnknown)
		live(t, s, req("b", 3, "f3"))
	})
	t.Run("BodiesAndTruncation", func(t *testing.T) {
		s := f.Open(t)
		r := req("c", 1, "f1")
		r.Op, r.Input, r.InputStored = trajectory.OpWriteFile, []byte("file content"), true
		live(t, s, r)
		finish(t, s, "c", 1, "")
		live(t, s, req("c", 2, "f2"))
		if err := s.Finish(ctx, "c", 2, trajectory.Result{Status: 200, BodySize: 99 << 20, BodySHA256: "abc", Truncated: true}, time.Now()); err != nil {
			t.Fatal(err)
		}
		_, err := s.Begin(ctx, req("c", 2, "f2"))
		wantCode(t, err, api.CodeConflict)
		_, steps, err := s.Get(ctx, "c")
		if err != nil || string(steps[0].Input) != "file content" || !steps[0].InputStored || !steps[1].Result.Truncated {
			t.Fatalf("get: %+v %v", steps, err)
		}
	})
	t.Run("Rebind", func(t *testing.T) {
		s := f.Open(t)
		live(t, s, req("d", 1, "f1"))
		finish(t, s, "d", 1, "1")
		if err := s.Rebind(ctx, "d", "sb9", time.Now()); err != nil {
			t.Fatal(err)
		}
		if d, err := s.Begin(ctx, req("d", 1, "f1")); err != nil || d.Replay == nil {
			t.Fatalf("replay addressed to the old sandbox: %+v %v", d, err)
		}
		_, err := s.Begin(ctx, req("d", 2, "f2"))
		wantCode(t, err, api.CodeConflict)
		r := req("d", 2, "f2")
		r.SandboxID = "sb9"
		live(t, s, r)
		meta, _, _ := s.Get(ctx, "d")
		if meta.SandboxID != "sb9" || len(meta.Sandboxes) != 2 || meta.Rebuilds != 1 {
			t.Fatalf("meta: %+v", meta)
		}
	})
	t.Run("ListDeletePrune", func(t *testing.T) {
		s := f.Open(t)
		base := time.Now().Add(-time.Hour)
		for i := range 5 {
			r := req(fmt.Sprintf("p%d", i), 1, "f")
			r.Now = base.Add(time.Duration(i) * time.Minute)
			live(t, s, r)
		}
		list, err := s.List(ctx)
		if err != nil || len(list) != 5 {
			t.Fatalf("list: %v %v", list, err)
		}
		if err := s.Delete(ctx, "p4"); err != nil {
			t.Fatal(err)
		}
		wantCode(t, s.Delete(ctx, "p4"), api.CodeNotFound)
		n, err := s.Prune(ctx, base.Add(90*time.Second), 0) // p0, p1
		if err != nil || n != 2 {
			t.Fatalf("prune by age: %d %v", n, err)
		}
		n, err = s.Prune(ctx, time.Time{}, 1) // p2 goes, p3 stays
		if err != nil || n != 1 {
			t.Fatalf("prune by count: %d %v", n, err)
		}
		list, _ = s.List(ctx)
		if len(list) != 1 || list[0].ID != "p3" {
			t.Fatalf("after prune: %+v", list)
		}
	})
	t.Run("Concurrent", func(t *testing.T) {
		s := f.Open(t)
		const trajs, steps = 40, 25
		var wg sync.WaitGroup
		errs := make(chan error, trajs)
		for i := range trajs {
			wg.Go(func() {
				id := fmt.Sprintf("c%d", i)
				for n := 1; n <= steps; n++ {
					r := req(id, n, fmt.Sprintf("%s-%d", id, n))
					r.SandboxID = fmt.Sprintf("sb%d", i%3)
					d, err := s.Begin(ctx, r)
					if err != nil || d.Replay != nil {
						errs <- fmt.Errorf("%s/%d: %+v %v", id, n, d, err)
						return
					}
					body := []byte(fmt.Sprintf("%s result %d", id, n))
					if err := s.Finish(ctx, id, n, trajectory.Result{Status: 200, Body: body}, time.Now()); err != nil {
						errs <- err
						return
					}
				}
				// The same step from two goroutines at once: one runs, one conflicts.
				var got [2]error
				var w2 sync.WaitGroup
				for k := range 2 {
					w2.Go(func() {
						r := req(id, steps+1, "dup")
						r.SandboxID = fmt.Sprintf("sb%d", i%3)
						_, got[k] = s.Begin(ctx, r)
					})
				}
				w2.Wait()
				if (got[0] == nil) == (got[1] == nil) || code(got[0])+code(got[1]) != api.CodeConflict {
					errs <- fmt.Errorf("%s duplicate begin: %v / %v", id, got[0], got[1])
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for i := range trajs {
			id := fmt.Sprintf("c%d", i)
			_, st, err := s.Get(ctx, id)
			if err != nil || len(st) != steps+1 {
				t.Fatalf("%s: %d steps %v", id, len(st), err)
			}
			for _, x := range st[:steps] {
				if want := fmt.Sprintf("%s result %d", id, x.N); string(x.Result.Body) != want || x.SandboxID != fmt.Sprintf("sb%d", i%3) {
					t.Fatalf("%s step %d mixed up: %q in %s", id, x.N, x.Result.Body, x.SandboxID)
				}
			}
		}
	})
}
