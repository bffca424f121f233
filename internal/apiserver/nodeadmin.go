package apiserver

import (
	"context"

	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/pkg/api"
)

// envMarks are the environment store's per-node in-use marks
// (envstore.EtcdState).
type envMarks interface {
	MarkedBy(ctx context.Context, node string) ([]string, error)
	UnmarkUse(ctx context.Context, env, node string) error
}

// nodeAdmin is the router's Drainer: drain flags, and removing a lost node
// (registry records, env in-use marks, request-ID claims).
type nodeAdmin struct {
	cluster.Admin
	marks envMarks
}

// RemoveNode removes lost node's env in-use marks and request claims, then its
// registry records. A live node is refused before anything is removed (and
// again by the registry's transaction, which compares its lease key): conflict;
// an unknown one is not_found. It can be re-run after a partial failure.
func (a nodeAdmin) RemoveNode(ctx context.Context, node string) (api.RemoveNodeResponse, error) {
	out := api.RemoveNodeResponse{Node: node, EnvMarks: []string{}}
	if err := a.CheckForgettable(ctx, node); err != nil {
		return out, err
	}
	envs, err := a.marks.MarkedBy(ctx, node)
	if err != nil {
		return out, err
	}
	for _, env := range envs {
		if err := a.marks.UnmarkUse(ctx, env, node); err != nil {
			return out, err
		}
		out.EnvMarks = append(out.EnvMarks, env)
	}
	if out.RequestClaims, err = a.ForgetClaims(ctx, node); err != nil {
		return out, err
	}
	return out, a.Forget(ctx, node)
}
