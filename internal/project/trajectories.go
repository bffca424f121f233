package project

import (
	"context"
	"strings"

	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Trajectories are scoped to projects as sandboxes are: each project has its
// own trajectory IDs. A trajectory ID a client names (X-Dsec-Trajectory, the
// /v1/trajectories routes) is logged under TrajectoryKey: the project's name
// and "/" before it, except for the default project (whose keys are the IDs,
// as before projects existed). "/" is not allowed in trajectory IDs, so no ID
// of one project names another's trajectory: another project's trajectory is
// not found, whether listed, read, deleted, rebuilt or stepped into (a step
// with the same ID starts the caller's own trajectory).

// trajectorySep separates the project from the ID in a trajectory key.
const trajectorySep = "/"

// TrajectoryKey is the key project p's trajectory id is logged under.
func TrajectoryKey(p, id string) string {
	if p == "" || p == Default {
		return id
	}
	return p + trajectorySep + id
}

// TrajectoryKeyOf is TrajectoryKey for ctx's caller.
func TrajectoryKeyOf(ctx context.Context, id string) string { return TrajectoryKey(caller(ctx), id) }

// trajectoryID returns the ID a key has for project p (ok false: another
// project's key).
func trajectoryID(p, key string) (string, bool) {
	if p == Default {
		return key, !strings.Contains(key, trajectorySep)
	}
	return strings.CutPrefix(key, p+trajectorySep)
}

// Trajectories is the trajectory API scoped to the caller's project (see
// TrajectoryKey): lists hold only its trajectories, shown by their IDs, and an
// ID is looked up under the caller's key only.
type Trajectories struct{ API session.Trajectories }

var _ session.Trajectories = Trajectories{}

// ListTrajectories implements session.Trajectories.
func (t Trajectories) ListTrajectories(ctx context.Context) ([]api.Trajectory, error) {
	all, err := t.API.ListTrajectories(ctx)
	if err != nil {
		return nil, err
	}
	p := caller(ctx)
	out := all[:0:0]
	for _, tr := range all {
		if id, ok := trajectoryID(p, tr.ID); ok {
			tr.ID = id
			out = append(out, tr)
		}
	}
	return out, nil
}

// key checks a client's trajectory ID and returns the caller's key for it.
func (t Trajectories) key(ctx context.Context, id string) (string, error) {
	if err := session.ValidateTrajectoryID(id); err != nil {
		return "", err
	}
	return TrajectoryKeyOf(ctx, id), nil
}

// GetTrajectory implements session.Trajectories.
func (t Trajectories) GetTrajectory(ctx context.Context, id string) (api.Trajectory, error) {
	k, err := t.key(ctx, id)
	if err != nil {
		return api.Trajectory{}, err
	}
	tr, err := t.API.GetTrajectory(ctx, k)
	if err != nil {
		return tr, err
	}
	tr.ID = id
	for i := range tr.Steps {
		tr.Steps[i].Trajectory = id
	}
	return tr, nil
}

// DeleteTrajectory implements session.Trajectories.
func (t Trajectories) DeleteTrajectory(ctx context.Context, id string) error {
	k, err := t.key(ctx, id)
	if err != nil {
		return err
	}
	return t.API.DeleteTrajectory(ctx, k)
}

// RebuildTrajectory implements session.Trajectories.
func (t Trajectories) RebuildTrajectory(ctx context.Context, id string) (api.RebuildResponse, error) {
	k, err := t.key(ctx, id)
	if err != nil {
		return api.RebuildResponse{}, err
	}
	out, err := t.API.RebuildTrajectory(ctx, k)
	if err == nil {
		out.Trajectory = id
	}
	return out, err
}
