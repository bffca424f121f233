package trajectory

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// The trajectory API: reading, deleting and rebuilding logged trajectories.

// Label is set on a sandbox a rebuild creates (its value is the trajectory ID).
const Label = "dsec.trajectory"

func trajectoryView(m Meta) api.Trajectory {
	return api.Trajectory{ID: m.ID, SandboxID: m.SandboxID, Sandboxes: m.Sandboxes, Create: m.Create,
		CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt, LastStep: m.Last, StepCount: m.Count, Rebuilds: m.Rebuilds,
		Replays: m.Replays, Divergences: m.Divergences}
}

// ListTrajectories returns every trajectory (without steps), by ID.
func (s *Service) ListTrajectories(ctx context.Context) ([]api.Trajectory, error) {
	metas, err := s.store.List(ctx)
	if err != nil {
		return nil, errdefs.Internal(err, "listing trajectories")
	}
	out := make([]api.Trajectory, 0, len(metas))
	for _, m := range metas {
		out = append(out, trajectoryView(m))
	}
	return out, nil
}

// GetTrajectory returns a trajectory with its steps and their results.
func (s *Service) GetTrajectory(ctx context.Context, id string) (api.Trajectory, error) {
	meta, steps, err := s.store.Get(ctx, id)
	if err != nil {
		return api.Trajectory{}, err
	}
	t := trajectoryView(meta)
	t.Steps = make([]api.TrajectoryStep, 0, len(steps))
	for _, st := range steps {
		t.Steps = append(t.Steps, StepView(st))
	}
	return t, nil
}

// DeleteTrajectory removes a trajectory (not_found if none).
func (s *Service) DeleteTrajectory(ctx context.Context, id string) error {
	return s.store.Delete(ctx, id)
}

// PruneTrajectories deletes trajectories not updated since olderThan, then the
// least recently updated beyond max; it returns how many.
func (s *Service) PruneTrajectories(ctx context.Context, olderThan time.Time, max int) (int, error) {
	return s.store.Prune(ctx, olderThan, max)
}

// RebuildTrajectory replaces a trajectory's lost sandbox: it creates a fresh one
// with the parameters recorded at the first step, re-executes the logged mutating
// steps in order, reports each one's outcome and binds the trajectory to the new
// sandbox. The log keeps the original results.
func (s *Service) RebuildTrajectory(ctx context.Context, id string) (api.RebuildResponse, error) {
	ctx = session.WithoutStep(ctx)
	meta, steps, err := s.store.Get(ctx, id)
	if err != nil {
		return api.RebuildResponse{}, err
	}
	sb, gerr := s.inner.Get(ctx, meta.SandboxID)
	if lost, _ := sandboxLost(sb, gerr); !lost {
		if gerr != nil {
			return api.RebuildResponse{}, gerr
		}
		return api.RebuildResponse{}, errdefs.Conflict("sandbox %s of trajectory %q is alive: a rebuild only replaces a lost sandbox", meta.SandboxID, id)
	}
	req := meta.Create
	req.RequestID = fmt.Sprintf("trajectory-rebuild:%s:%d", id, meta.Rebuilds+1)
	labels := map[string]string{}
	for k, v := range req.Labels {
		labels[k] = v
	}
	labels[Label] = id
	req.Labels = labels
	nsb, err := s.inner.Create(ctx, req)
	if err != nil {
		return api.RebuildResponse{}, err
	}
	out := api.RebuildResponse{Trajectory: id, OldSandbox: meta.SandboxID, SandboxID: nsb.ID, Steps: []api.RebuiltStep{}}
	for _, st := range steps {
		rs := s.reexecute(ctx, nsb.ID, st)
		if rs.Action == "reexecuted" {
			out.Reexecuted++
			if !rs.Matched {
				out.Mismatched++
			}
		}
		out.Steps = append(out.Steps, rs)
	}
	if err := s.store.Rebind(ctx, id, nsb.ID, time.Now()); err != nil {
		return api.RebuildResponse{}, err
	}
	return out, nil
}

// reexecute runs one logged step again in sandbox id and compares its outcome
// with the logged one (exec: exit code, stdout, stderr; others: success or the
// same error code).
func (s *Service) reexecute(ctx context.Context, id string, st Step) api.RebuiltStep {
	rs := api.RebuiltStep{Step: st.N, Op: st.Op, Action: "skipped"}
	switch {
	case !Mutating(st.Op):
		rs.Detail = "not a mutating operation"
		return rs
	case st.State != api.StepFinished:
		rs.Detail = "outcome unknown: not re-executed"
		return rs
	case !st.InputStored && (st.Op == OpWriteFile || st.Op == OpUploadArchive):
		rs.Detail = "its request body was over the log's cap and was not kept"
		return rs
	}
	rs.Action = "reexecuted"
	var logged Outcome
	haveLog := false
	if st.Result != nil && !st.Result.Truncated {
		if o, err := st.Result.Outcome(st.Op); err == nil {
			logged, haveLog = o, true
		}
	}
	var err error
	switch st.Op {
	case OpExec, OpExecStream, OpStartProcess:
		var a ExecArgs
		if err = json.Unmarshal(st.Args, &a); err != nil {
			break
		}
		req := api.ExecRequest{Cmd: a.Cmd, Shell: a.Shell, Env: a.Env, Cwd: a.Cwd, User: a.User,
			TimeoutMs: a.TimeoutMs, MaxOutputBytes: a.MaxOutputBytes, OutputEncoding: a.OutputEncoding}
		if len(st.Input) > 0 {
			req.StdinBase64 = base64.StdEncoding.EncodeToString(st.Input)
		}
		if st.Op == OpStartProcess {
			_, err = s.inner.StartProcess(ctx, id, req)
			break
		}
		var res api.ExecResult
		res, err = s.inner.Exec(ctx, id, req)
		if err == nil && haveLog && logged.Error == nil {
			if want, ok := loggedExec(logged); ok {
				rs.Matched = want.ExitCode == res.ExitCode && want.Stdout == res.Stdout && want.Stderr == res.Stderr
				if !rs.Matched {
					rs.Detail = fmt.Sprintf("exit code %d (logged %d)", res.ExitCode, want.ExitCode)
				}
				return rs
			}
		}
	default:
		var a FileArgs
		if err = json.Unmarshal(st.Args, &a); err != nil {
			break
		}
		err = s.reexecuteFile(ctx, id, st, a)
	}
	var code, loggedCode api.Code
	if err != nil {
		code = errdefs.CodeOf(err)
		rs.Detail = err.Error()
	}
	if logged.Error != nil {
		loggedCode = logged.Error.Code
	}
	rs.Matched = haveLog && code == loggedCode
	if !rs.Matched && rs.Detail == "" && haveLog {
		rs.Detail = fmt.Sprintf("succeeded (logged %s)", loggedCode)
	}
	return rs
}

func (s *Service) reexecuteFile(ctx context.Context, id string, st Step, a FileArgs) error {
	fs, err := s.inner.FS(ctx, id)
	if err != nil {
		return err
	}
	defer fs.Close()
	switch st.Op {
	case OpWriteFile:
		_, err = fs.WriteFile(ctx, a.Path, os.FileMode(a.Mode), bytes.NewReader(st.Input), MaxBodyLog)
		return err
	case OpUploadArchive:
		return fs.ExtractTar(ctx, a.Path, bytes.NewReader(st.Input))
	case OpMkdir:
		_, err = fs.Mkdir(ctx, a.Path, os.FileMode(a.Mode), a.Parents)
		return err
	case OpRemove:
		return fs.Remove(ctx, a.Path, a.Recursive)
	}
	return errdefs.Invalid("operation %s cannot be re-executed", st.Op)
}

// loggedExec is the logged outcome of an exec or exec/stream step, with a
// stream's output joined.
func loggedExec(o Outcome) (api.ExecResult, bool) {
	if o.Exec == nil {
		return api.ExecResult{}, false
	}
	res := *o.Exec
	if len(o.Events) > 0 {
		var out, errb bytes.Buffer
		for _, ev := range o.Events {
			if ev.Stream == "stderr" {
				errb.Write(ev.Data)
			} else {
				out.Write(ev.Data)
			}
		}
		res.Stdout, res.Stderr = out.String(), errb.String()
	}
	return res, true
}
