package router

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/dsec-dev/dsec/internal/cluster/placement"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/tracing"
	"github.com/dsec-dev/dsec/pkg/api"
)

// batchParallel bounds the node creates one batch runs at once.
const batchParallel = 64

// placementRequest is what the engine needs to know about req.
func placementRequest(req api.CreateSandboxRequest) placement.Request {
	p := placement.Request{Backend: req.Backend, Node: req.Node,
		MilliCPU: int64(req.CPU * 1000), MemoryBytes: req.MemoryBytes}
	if p.Backend == "" {
		p.Backend = api.BackendContainer
	}
	for k, v := range req.Constraints {
		p.Constraints = append(p.Constraints, placement.Constraint{Key: k, Value: v})
	}
	return p
}

// forwarded is req as the node gets it: placement already used its node and
// label constraints.
func forwarded(req api.CreateSandboxRequest) api.CreateSandboxRequest {
	req.Node, req.Constraints = "", nil
	return req
}

// Create implements session.Service: place, then let the node admit it,
// re-placing on rejection, all in one "placement" span (the node RPCs are its
// children).
func (r *Router) Create(ctx context.Context, req api.CreateSandboxRequest) (_ api.Sandbox, err error) {
	preq := placementRequest(req)
	preq.Layers = r.envLayers(ctx, req.Image) // image locality: a tie-breaker
	ctx, sp := r.placementSpan(ctx, preq.Backend)
	defer func() { endPlacement(sp, err) }()
	t0 := time.Now()
	d, err := r.cfg.Engine.Place(ctx, preq)
	r.cfg.Observer.Placed(preq.Backend, time.Since(t0), err)
	if err != nil {
		// A retry of a create that already has its node needs no new room.
		if holder, herr := r.claimed(ctx, req.RequestID); herr == nil && holder != "" {
			sp.SetAttributes(attribute.String("dsec.placement.node", holder), attribute.Bool("dsec.placement.retry", true))
			return r.createOn(ctx, holder, forwarded(req))
		}
		return api.Sandbox{}, err
	}
	return r.admit(ctx, sp, d, req)
}

// placementSpan starts the "placement" span of a create (none without a
// recording tracer: its attributes would cost an allocation each for nothing).
func (r *Router) placementSpan(ctx context.Context, backend string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !r.traced {
		return ctx, tracing.NoSpan
	}
	return r.tracer.Start(ctx, "placement", trace.WithAttributes(append(attrs, attribute.String("dsec.backend", backend))...))
}

// endPlacement ends a placement span with the create's outcome.
func endPlacement(sp trace.Span, err error) {
	if err != nil && sp.IsRecording() {
		sp.SetAttributes(attribute.String("dsec.error_code", string(errdefs.ToAPI(err).Code)))
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
}

// admit runs decision d to its end: the node creates the sandbox (Confirm), or
// rejects it (Reject: placed again elsewhere), or fails (Release). sp is the
// placement span (ctx's): it gets the candidates, the node chosen, the
// re-placements and an event per rejection.
func (r *Router) admit(ctx context.Context, sp trace.Span, d *placement.Decision, req api.CreateSandboxRequest) (api.Sandbox, error) {
	fwd := forwarded(req)
	claimed := ""
	traced := sp.IsRecording()
	if traced {
		sp.SetAttributes(attribute.Int("dsec.placement.candidates", d.Candidates), attribute.Int("dsec.placement.replacements", 0))
	}
	for {
		node := d.Node
		if traced {
			sp.SetAttributes(attribute.String("dsec.placement.node", node))
		}
		if req.RequestID != "" && r.cfg.Claims != nil {
			holder, err := r.claim(ctx, req.RequestID, claimed, node)
			if err != nil {
				r.cfg.Engine.Release(d)
				return api.Sandbox{}, err
			}
			claimed = holder
			if holder != node {
				// Another API server placed this request ID first: its node
				// has (or is making) the sandbox and deduplicates the retry.
				r.cfg.Engine.Release(d)
				sp.SetAttributes(attribute.String("dsec.placement.node", holder))
				return r.createOn(ctx, holder, fwd)
			}
		}
		sb, err := r.createOn(ctx, node, fwd)
		if err == nil || errdefs.Is(err, api.CodeStartFailed) {
			// A failed start command keeps its sandbox on the node: placed,
			// and its request ID stays claimed there.
			r.cfg.Engine.Confirm(d)
			return sb, err
		}
		// A node lost since the engine's last snapshot counts as a rejection.
		if !placement.IsRejection(err) && !errdefs.Is(err, api.CodeNodeLost) {
			r.cfg.Engine.Release(d)
			r.dropClaim(req.RequestID, claimed)
			return api.Sandbox{}, err
		}
		r.log.Debug("node rejected a sandbox; placing it again", "node", node, "err", err)
		backend := placementRequest(req).Backend
		r.cfg.Observer.Rejected(backend, err)
		sp.AddEvent("rejected", trace.WithAttributes(attribute.String("dsec.node", node),
			attribute.String("dsec.error_code", string(errdefs.ToAPI(err).Code))))
		d, err = r.cfg.Engine.Reject(ctx, d, err)
		if err != nil {
			r.dropClaim(req.RequestID, claimed)
			return api.Sandbox{}, err
		}
		r.cfg.Observer.Replaced(backend)
		sp.SetAttributes(attribute.Int("dsec.placement.replacements", d.Attempt-1))
	}
}

// claimed returns the node already holding request id ("" for none): a retry
// goes there without being placed again (it needs no new room).
func (r *Router) claimed(ctx context.Context, id string) (string, error) {
	if id == "" || r.cfg.Claims == nil {
		return "", nil
	}
	node, ok, err := r.cfg.Claims.Lookup(ctx, id)
	if err != nil || !ok {
		return "", err
	}
	return node, nil
}

// claim claims request id for node, or moves the claim from the node that
// rejected it; it returns the claim's holder.
func (r *Router) claim(ctx context.Context, id, from, node string) (string, error) {
	if from == "" {
		return r.cfg.Claims.Claim(ctx, id, node)
	}
	return r.cfg.Claims.Move(ctx, id, from, node)
}

func (r *Router) dropClaim(id, node string) {
	if id == "" || node == "" || r.cfg.Claims == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r.cfg.Claims.Drop(ctx, id, node)
}

// createOn creates the sandbox on the named node.
func (r *Router) createOn(ctx context.Context, node string, req api.CreateSandboxRequest) (api.Sandbox, error) {
	svc, err := r.nodeFor(node, "create")
	if err != nil {
		return api.Sandbox{}, err
	}
	return svc.Create(ctx, req)
}

// CreateBatch implements session.Service: every sandbox or none. The whole
// batch is placed first (nothing is created when it does not fit), then each
// node admits its share; if any sandbox fails for good, every sandbox the batch
// created is deleted again and the first failure is returned.
func (r *Router) CreateBatch(ctx context.Context, reqs []api.CreateSandboxRequest) ([]api.Sandbox, error) {
	holders := make([]string, len(reqs))
	ds, err := r.placeAll(ctx, reqs)
	if err != nil {
		// Requests retried from an earlier batch need no new room: they go to
		// their nodes unplaced, and only the others are placed.
		if ds, err = r.placeUnclaimed(ctx, reqs, holders, err); err != nil {
			return nil, err
		}
	}
	return session.CreateEach(ctx, len(reqs), batchParallel, func(ctx context.Context, i int) (api.Sandbox, error) {
		if ds[i] == nil {
			return r.createOn(ctx, holders[i], forwarded(reqs[i]))
		}
		// Each sandbox's admission has a placement span of its own.
		ctx, sp := r.placementSpan(ctx, ds[i].Request().Backend, attribute.Int("dsec.placement.batch", len(reqs)))
		sb, err := r.admit(ctx, sp, ds[i], reqs[i])
		endPlacement(sp, err)
		return sb, err
	}, func(ctx context.Context, id string) error {
		err := r.Delete(ctx, id)
		if err != nil {
			r.log.Warn("batch rollback: deleting a sandbox failed", "id", id, "err", err)
		}
		return err
	}, func(i int) {
		if ds[i] != nil {
			r.cfg.Engine.Release(ds[i]) // placed, never admitted
		}
	})
}

// placeUnclaimed looks up every request ID's claim (filling holders) and
// places the requests nobody holds; it returns placeErr when none is held.
func (r *Router) placeUnclaimed(ctx context.Context, reqs []api.CreateSandboxRequest, holders []string, placeErr error) ([]*placement.Decision, error) {
	errs := make([]error, len(reqs))
	r.parallel(len(reqs), func(i int) { holders[i], errs[i] = r.claimed(ctx, reqs[i].RequestID) })
	var fresh []int
	for i := range reqs {
		if errs[i] != nil {
			return nil, errs[i]
		}
		if holders[i] == "" {
			fresh = append(fresh, i)
		}
	}
	if len(fresh) == len(reqs) {
		return nil, placeErr
	}
	ds := make([]*placement.Decision, len(reqs))
	if len(fresh) == 0 {
		return ds, nil
	}
	toPlace := make([]api.CreateSandboxRequest, len(fresh))
	for j, i := range fresh {
		toPlace[j] = reqs[i]
	}
	placed, err := r.placeAll(ctx, toPlace)
	if err != nil {
		return nil, err
	}
	for j, i := range fresh {
		ds[i] = placed[j]
	}
	return ds, nil
}

// parallel runs f(0..n-1), batchParallel at a time.
func (r *Router) parallel(n int, f func(i int)) {
	sem := make(chan struct{}, batchParallel)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(i)
		}()
	}
	wg.Wait()
}

// placeAll places every request of a batch or none: requests of one shape go
// through PlaceBatch (one consistent view), mixed ones one by one.
func (r *Router) placeAll(ctx context.Context, reqs []api.CreateSandboxRequest) ([]*placement.Decision, error) {
	preqs := make([]placement.Request, len(reqs))
	same := true
	for i, req := range reqs {
		preqs[i] = placementRequest(req)
		preqs[i].Layers = r.envLayers(ctx, req.Image)
		same = same && sameShape(preqs[0], preqs[i])
	}
	if same {
		t0 := time.Now()
		ds, err := r.cfg.Engine.PlaceBatch(ctx, preqs[0], len(reqs))
		for range reqs {
			r.cfg.Observer.Placed(preqs[0].Backend, time.Since(t0), err)
		}
		return ds, err
	}
	ds := make([]*placement.Decision, 0, len(reqs))
	for i, p := range preqs {
		t0 := time.Now()
		d, err := r.cfg.Engine.Place(ctx, p)
		r.cfg.Observer.Placed(p.Backend, time.Since(t0), err)
		if err != nil {
			for _, done := range ds {
				r.cfg.Engine.Release(done)
			}
			return nil, fmt.Errorf("batch: sandboxes[%d] does not fit, none placed: %w", i, err)
		}
		ds = append(ds, d)
	}
	return ds, nil
}

func sameShape(a, b placement.Request) bool {
	if a.Backend != b.Backend || a.Node != b.Node || a.MilliCPU != b.MilliCPU || a.MemoryBytes != b.MemoryBytes ||
		len(a.Constraints) != len(b.Constraints) || len(a.Hardware) != 0 || len(b.Hardware) != 0 {
		return false
	}
	am := make(map[placement.Constraint]bool, len(a.Constraints))
	for _, c := range a.Constraints {
		am[c] = true
	}
	for _, c := range b.Constraints {
		if !am[c] {
			return false
		}
	}
	return true
}

// errNoNodes: nothing to send a node-less call to.
var errNoNodes = errdefs.New(api.CodeUnavailable, "no ready node in the cluster")

// anyReady returns the service of some ready node (for FnCall and Info).
func (r *Router) anyReady() (string, error) {
	var ready []string
	for _, n := range r.cfg.Nodes.Nodes() {
		if n.State == placement.StateReady {
			ready = append(ready, n.Name)
		}
	}
	if len(ready) == 0 {
		return "", errNoNodes
	}
	return ready[int(time.Now().UnixNano()%int64(len(ready)))], nil
}
