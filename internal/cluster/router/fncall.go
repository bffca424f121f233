package router

import (
	"context"
	"slices"

	"github.com/dsec-dev/dsec/internal/cluster/placement"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// FnCalls in a cluster: a FnCall goes to a ready node that advertises the
// fncall backend, picked by a placement engine of its own (power-of-k, least
// loaded) over the nodes' FnCall capacity and load (FnCallSource) plus this
// API server's calls in flight; a FnCall of a device (gpu) only to nodes
// that advertise it (not_implemented when none does). A node that refuses it
// (its --max-fncalls reached, or gone) makes the engine place it again
// elsewhere; when no node has room the answer is resource_exhausted with
// Retry-After. A FnCall leaves
// nothing behind, so its in-flight charge is released when it returns.

// FnCallSource is the placement source of FnCalls: the nodes serving FnCall,
// each with its FnCall capacity and load as the sandboxes it takes.
type FnCallSource struct{ Nodes NodeView }

// Snapshot implements placement.Source.
func (s FnCallSource) Snapshot(ctx context.Context) ([]placement.Node, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []placement.Node
	for _, n := range s.Nodes.Nodes() {
		if !slices.Contains(n.Backends, api.BackendFnCall) {
			continue
		}
		out = append(out, placement.Node{
			Name: n.Name, State: n.State, Backends: []string{api.BackendFnCall}, Labels: n.Labels, Hardware: n.Hardware,
			Capacity:   placement.Resources{Sandboxes: n.FnCallCapacity},
			Load:       placement.Resources{Sandboxes: n.FnCallLoad},
			ObservedAt: n.ObservedAt,
		})
	}
	return out, nil
}

// FnCall implements session.FnCalls (see above).
func (r *Router) FnCall(ctx context.Context, req api.FnCallRequest) (api.FnCallResult, error) {
	eng := r.cfg.FnCalls
	if eng == nil {
		return r.fnCallAnyReady(ctx, req)
	}
	d, err := eng.Place(ctx, placement.Request{Backend: api.BackendFnCall, Hardware: fnCallHardware(req)})
	switch {
	case err == nil:
	case req.Device != "" && errdefs.Is(err, api.CodeInvalidArgument):
		err = errdefs.Wrap(api.CodeNotImplemented, err, "no node of the cluster serves FnCalls of device %q", req.Device)
	case errdefs.Is(err, api.CodeUnavailable):
		err = errdefs.Wrap(api.CodeUnavailable, err, "no ready node serves FnCall")
	}
	for err == nil {
		res, cerr := r.fnCallOn(ctx, d.Node, req)
		if cerr == nil || !refusedFnCall(cerr) {
			eng.Release(d)
			return res, cerr
		}
		r.log.Debug("node refused a FnCall; placing it again", "node", d.Node, "err", cerr)
		d, err = eng.Reject(ctx, d, cerr)
	}
	return api.FnCallResult{}, err
}

// fnCallHardware is the hardware req's device needs of a node: a FnCall of
// device "gpu" goes only to nodes that advertise a GPU (a node without one
// refuses it as not_implemented).
func fnCallHardware(req api.FnCallRequest) []string {
	if req.Device == "" || req.Device == "cpu" {
		return nil
	}
	return []string{req.Device}
}

// refusedFnCall reports whether a node's FnCall error means "another node
// may run it": no room, unavailable, lost, or FnCall turned off there since
// the last snapshot. Placing it again is safe: a refusal comes before it runs,
// and a FnCall changes nothing outside its own throwaway sandbox.
func refusedFnCall(err error) bool {
	return placement.IsRejection(err) || errdefs.Is(err, api.CodeNodeLost) || errdefs.Is(err, api.CodeNotImplemented)
}

// fnCallOn runs req on the named node.
func (r *Router) fnCallOn(ctx context.Context, node string, req api.FnCallRequest) (api.FnCallResult, error) {
	svc, err := r.nodeFor(node, "fncall")
	if err != nil {
		return api.FnCallResult{}, err
	}
	return svc.FnCall(ctx, req)
}

// fnCallAnyReady runs req on some ready node (a router without a FnCall
// engine: tests).
func (r *Router) fnCallAnyReady(ctx context.Context, req api.FnCallRequest) (api.FnCallResult, error) {
	name, err := r.anyReady()
	if err != nil {
		return api.FnCallResult{}, err
	}
	return r.fnCallOn(ctx, name, req)
}
