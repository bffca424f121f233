package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/dsec-dev/dsec/pkg/api"
)

type stepKey struct{}

type stepTag struct {
	traj string
	step int
}

// WithTrajectory returns a context that tags the session operations made with it
// (Exec, ExecStream, StartProcess, ReadFile, WriteFile, UploadTar, Mkdir, Remove,
// HTTP) as step `step` of trajectory `traj`. The server logs each step; a step
// it already finished is answered from its log (ExecResult.Replayed, header
// X-Dsec-Replayed) without running again.
func WithTrajectory(ctx context.Context, traj string, step int) context.Context {
	return context.WithValue(ctx, stepKey{}, stepTag{traj, step})
}

// setStepHeaders adds the trajectory headers ctx carries to h.
func setStepHeaders(ctx context.Context, h http.Header) {
	if t, ok := ctx.Value(stepKey{}).(stepTag); ok {
		h.Set(api.TrajectoryHeader, t.traj)
		h.Set(api.StepHeader, strconv.Itoa(t.step))
	}
}

// Replayed says whether a response was answered from a trajectory log.
func Replayed(resp *http.Response) bool {
	return resp != nil && resp.Header.Get(api.ReplayedHeader) == "true"
}

func trajPath(id string, rest ...string) string {
	p := "/v1/trajectories/" + esc(id)
	for _, r := range rest {
		p += r
	}
	return p
}

// ListTrajectories lists the logged trajectories (without their steps).
func (c *Client) ListTrajectories(ctx context.Context) ([]api.Trajectory, error) {
	var out api.ListTrajectoriesResponse
	err := c.do(ctx, call{method: http.MethodGet, path: "/v1/trajectories", retry: true}, &out)
	return out.Trajectories, err
}

// GetTrajectory returns a trajectory with its steps and their results.
func (c *Client) GetTrajectory(ctx context.Context, id string) (api.Trajectory, error) {
	var t api.Trajectory
	err := c.do(ctx, call{method: http.MethodGet, path: trajPath(id), retry: true}, &t)
	return t, err
}

// ExportTrajectory streams a trajectory as JSON lines (one api.TrajectoryStep
// per line) to w.
func (c *Client) ExportTrajectory(ctx context.Context, id string, w io.Writer) error {
	resp, err := c.send(ctx, call{method: http.MethodGet, path: trajPath(id, "/export"), retry: true})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("dsec client: reading export: %w", err)
	}
	return nil
}

// ExportSteps reads a trajectory's export into steps.
func (c *Client) ExportSteps(ctx context.Context, id string) ([]api.TrajectoryStep, error) {
	resp, err := c.send(ctx, call{method: http.MethodGet, path: trajPath(id, "/export"), retry: true})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out []api.TrajectoryStep
	dec := json.NewDecoder(resp.Body)
	for dec.More() {
		var st api.TrajectoryStep
		if err := dec.Decode(&st); err != nil {
			return nil, fmt.Errorf("dsec client: decoding export: %w", err)
		}
		out = append(out, st)
	}
	return out, nil
}

// DeleteTrajectory deletes a trajectory's log.
func (c *Client) DeleteTrajectory(ctx context.Context, id string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: trajPath(id)}, nil)
}

// RebuildTrajectory replaces a trajectory's lost sandbox: the server creates a
// fresh one with the same parameters and re-executes the logged mutating steps.
func (c *Client) RebuildTrajectory(ctx context.Context, id string) (api.RebuildResponse, error) {
	var out api.RebuildResponse
	err := c.do(ctx, call{method: http.MethodPost, path: trajPath(id, "/rebuild")}, &out)
	return out, err
}
