package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/trajectory"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TrajectoryLabel is set on a sandbox a rebuild creates (its value is the
// trajectory ID).
const TrajectoryLabel = "dsec.trajectory"

func (s *Server) trajStore(w http.ResponseWriter, r *http.Request) bool {
	if s.traj == nil {
		s.writeError(w, r, api.NewError(api.CodeNotImplemented, "this server keeps no trajectory log"))
		return false
	}
	return true
}

func trajectoryView(m trajectory.Meta) api.Trajectory {
	return api.Trajectory{ID: m.ID, SandboxID: m.SandboxID, Sandboxes: m.Sandboxes, Create: m.Create,
		CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt, LastStep: m.Last, StepCount: m.Count, Rebuilds: m.Rebuilds}
}

// StepView converts a logged step to its wire form.
func StepView(st trajectory.Step) api.TrajectoryStep {
	v := api.TrajectoryStep{Trajectory: st.Trajectory, Step: st.N, Op: st.Op, Fingerprint: st.Fingerprint,
		Args: st.Args, SandboxID: st.SandboxID, State: st.State, StartedAt: st.StartedAt, FinishedAt: st.FinishedAt}
	if st.FinishedAt != nil {
		v.DurationMs = float64(st.FinishedAt.Sub(st.StartedAt).Microseconds()) / 1000
	}
	if res := st.Result; res != nil {
		v.Status, v.Headers, v.BodySize, v.BodySHA256, v.Truncated = res.Status, res.Header, res.BodySize, res.BodySHA256, res.Truncated
		if strings.HasPrefix(res.Header["Content-Type"], "application/json") && json.Valid(res.Body) {
			v.Result = json.RawMessage(bytes.TrimSpace(res.Body))
		} else {
			v.Body = res.Body
		}
	}
	return v
}

func (s *Server) listTrajectories(w http.ResponseWriter, r *http.Request) {
	if !s.trajStore(w, r) {
		return
	}
	metas, err := s.traj.List(r.Context())
	if err != nil {
		s.writeError(w, r, errdefs.Internal(err, "listing trajectories"))
		return
	}
	out := api.ListTrajectoriesResponse{Trajectories: make([]api.Trajectory, 0, len(metas))}
	for _, m := range metas {
		out.Trajectories = append(out.Trajectories, trajectoryView(m))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getTrajectory(w http.ResponseWriter, r *http.Request) {
	if !s.trajStore(w, r) {
		return
	}
	meta, steps, err := s.traj.Get(r.Context(), r.PathValue("traj"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	t := trajectoryView(meta)
	t.Steps = make([]api.TrajectoryStep, 0, len(steps))
	for _, st := range steps {
		t.Steps = append(t.Steps, StepView(st))
	}
	writeJSON(w, http.StatusOK, t)
}

// exportTrajectory answers with JSON lines, one step per line.
func (s *Server) exportTrajectory(w http.ResponseWriter, r *http.Request) {
	if !s.trajStore(w, r) {
		return
	}
	_, steps, err := s.traj.Get(r.Context(), r.PathValue("traj"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	for _, st := range steps {
		if err := enc.Encode(StepView(st)); err != nil {
			return
		}
	}
}

func (s *Server) deleteTrajectory(w http.ResponseWriter, r *http.Request) {
	if !s.trajStore(w, r) {
		return
	}
	if err := s.traj.Delete(r.Context(), r.PathValue("traj")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// rebuildTrajectory handles POST /v1/trajectories/{traj}/rebuild: when the
// trajectory's sandbox is gone, it creates a fresh one with the same parameters,
// re-executes the logged mutating steps in order, reports each one's outcome and
// binds the trajectory to the new sandbox.
func (s *Server) rebuildTrajectory(w http.ResponseWriter, r *http.Request) {
	if !s.trajStore(w, r) {
		return
	}
	ctx := r.Context()
	id := r.PathValue("traj")
	meta, steps, err := s.traj.Get(ctx, id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	sb, gerr := s.svc.Get(ctx, meta.SandboxID)
	if lost, _ := sandboxLost(sb, gerr); !lost {
		if gerr != nil {
			s.writeError(w, r, gerr)
			return
		}
		s.writeError(w, r, errdefs.Conflict("sandbox %s of trajectory %q is alive: a rebuild only replaces a lost sandbox", meta.SandboxID, id))
		return
	}
	req := meta.Create
	req.RequestID = fmt.Sprintf("trajectory-rebuild:%s:%d", id, meta.Rebuilds+1)
	labels := map[string]string{}
	for k, v := range req.Labels {
		labels[k] = v
	}
	labels[TrajectoryLabel] = id
	req.Labels = labels
	nsb, err := s.svc.Create(ctx, req)
	if err != nil {
		s.writeError(w, r, err)
		return
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
	if err := s.traj.Rebind(ctx, id, nsb.ID, time.Now()); err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// reexecute runs one logged step again in sandbox id.
func (s *Server) reexecute(ctx context.Context, id string, st trajectory.Step) api.RebuiltStep {
	rs := api.RebuiltStep{Step: st.N, Op: st.Op, Action: "skipped"}
	switch {
	case !trajectory.Mutating(st.Op):
		rs.Detail = "not a mutating operation"
		return rs
	case st.State != api.StepFinished:
		rs.Detail = "outcome unknown: not re-executed"
		return rs
	case !st.InputStored && needsInput(st):
		rs.Detail = "its request body was over the log's cap and was not kept"
		return rs
	}
	rs.Action = "reexecuted"
	logged := st.Result
	status := 0
	var err error
	switch st.Op {
	case trajectory.OpExec, trajectory.OpExecStream, trajectory.OpStartProcess:
		var a trajectory.ExecArgs
		if err = json.Unmarshal(st.Args, &a); err != nil {
			break
		}
		req := api.ExecRequest{Cmd: a.Cmd, Shell: a.Shell, Env: a.Env, Cwd: a.Cwd, User: a.User,
			TimeoutMs: a.TimeoutMs, MaxOutputBytes: a.MaxOutputBytes, OutputEncoding: a.OutputEncoding}
		if len(st.Input) > 0 {
			req.StdinBase64 = b64(st.Input)
		}
		if st.Op == trajectory.OpStartProcess {
			_, err = s.svc.StartProcess(ctx, id, req)
			status = http.StatusCreated
			break
		}
		var res api.ExecResult
		res, err = s.svc.Exec(ctx, id, req)
		if err == nil {
			status = http.StatusOK
			if want, ok := loggedExec(st); ok {
				rs.Matched = logged.Status == status && want.ExitCode == res.ExitCode && want.Stdout == res.Stdout && want.Stderr == res.Stderr
				if !rs.Matched {
					rs.Detail = fmt.Sprintf("exit code %d (logged %d)", res.ExitCode, want.ExitCode)
				}
				return rs
			}
		}
	default:
		var a trajectory.FileArgs
		if err = json.Unmarshal(st.Args, &a); err != nil {
			break
		}
		status, err = s.reexecuteFile(ctx, id, st, a)
	}
	if err != nil {
		status = apiError(err).Status
		rs.Detail = err.Error()
	}
	rs.Matched = logged != nil && logged.Status == status
	if !rs.Matched && rs.Detail == "" && logged != nil {
		rs.Detail = fmt.Sprintf("status %d (logged %d)", status, logged.Status)
	}
	return rs
}

func needsInput(st trajectory.Step) bool {
	return st.Op == trajectory.OpWriteFile || st.Op == trajectory.OpUploadArchive
}

func (s *Server) reexecuteFile(ctx context.Context, id string, st trajectory.Step, a trajectory.FileArgs) (int, error) {
	fs, err := s.svc.FS(ctx, id)
	if err != nil {
		return 0, err
	}
	defer fs.Close()
	switch st.Op {
	case trajectory.OpWriteFile:
		_, err = fs.WriteFile(ctx, a.Path, os.FileMode(a.Mode), bytes.NewReader(st.Input), s.opts.MaxUploadBytes)
		return http.StatusOK, err
	case trajectory.OpUploadArchive:
		return http.StatusNoContent, fs.ExtractTar(ctx, a.Path, bytes.NewReader(st.Input))
	case trajectory.OpMkdir:
		_, err := fs.Mkdir(ctx, a.Path, os.FileMode(a.Mode), a.Parents)
		return http.StatusNoContent, err
	case trajectory.OpRemove:
		return http.StatusNoContent, fs.Remove(ctx, a.Path, a.Recursive)
	}
	return 0, errdefs.Invalid("operation %s cannot be re-executed", st.Op)
}

// loggedExec extracts the logged outcome of an exec or exec/stream step.
func loggedExec(st trajectory.Step) (api.ExecResult, bool) {
	if st.Result == nil || st.Result.Status != http.StatusOK {
		return api.ExecResult{}, false
	}
	if st.Op == trajectory.OpExec {
		var res api.ExecResult
		return res, json.Unmarshal(st.Result.Body, &res) == nil
	}
	var out, errb bytes.Buffer
	for _, line := range bytes.Split(st.Result.Body, []byte("\n")) {
		var ev api.StreamEvent
		if len(line) == 0 || json.Unmarshal(line, &ev) != nil {
			continue
		}
		switch ev.Type {
		case "stdout":
			out.Write(ev.Data)
		case "stderr":
			errb.Write(ev.Data)
		case "exit":
			if ev.Result != nil {
				res := *ev.Result
				res.Stdout, res.Stderr = out.String(), errb.String()
				return res, true
			}
		}
	}
	return api.ExecResult{}, false
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
