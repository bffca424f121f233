package trajectory

import (
	"context"

	"github.com/dsec-dev/dsec/pkg/api"
)

// API is the trajectory API a front end serves (/v1/trajectories): the
// decorator on one machine, a node's decorator over the node RPC, or a
// cluster's router (which asks the nodes that keep the steps).
type API interface {
	ListTrajectories(ctx context.Context) ([]api.Trajectory, error)
	GetTrajectory(ctx context.Context, id string) (api.Trajectory, error)
	DeleteTrajectory(ctx context.Context, id string) error
	RebuildTrajectory(ctx context.Context, id string) (api.RebuildResponse, error)
}

var _ API = (*Service)(nil)
