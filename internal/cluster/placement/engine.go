package placement

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Config tunes an Engine. The zero value is usable: every zero field takes the
// default documented on it.
type Config struct {
	// K is how many feasible nodes each placement samples (power-of-k choices).
	// Default 2; 1 is random choice; K ≥ the number of feasible nodes compares all.
	K int
	// TieTolerance is the score difference (a utilisation fraction) within which two
	// sampled nodes count as equally loaded, so that image locality decides. Default
	// 0.01 (one percentage point); negative means exact ties only.
	TieTolerance float64
	// MaxReplacements bounds how often one sandbox is placed again after agents
	// reject it. Default 3 (so at most 4 nodes are tried).
	MaxReplacements int
	// RefreshInterval is Watch's snapshot period. Default 1 s.
	RefreshInterval time.Duration
	// RetryAfter is what a resource_exhausted error tells the caller to wait.
	// Default: RefreshInterval (freed room becomes visible with the next snapshot),
	// at least 1 s.
	RetryAfter time.Duration
	// InFlightTTL drops an unconfirmed in-flight placement that was neither
	// confirmed nor released after this long (a caller that died). Default 2 min.
	InFlightTTL time.Duration
	// Seed makes sampling reproducible (tests); 0 seeds randomly.
	Seed uint64
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.K <= 0 {
		c.K = 2
	}
	if c.TieTolerance == 0 {
		c.TieTolerance = 0.01
	}
	if c.MaxReplacements <= 0 {
		c.MaxReplacements = 3
	}
	if c.RefreshInterval <= 0 {
		c.RefreshInterval = time.Second
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = max(c.RefreshInterval, time.Second)
	}
	if c.InFlightTTL <= 0 {
		c.InFlightTTL = 2 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Request describes one sandbox to place.
type Request struct {
	Backend  string   // required: "container", "microvm", ...
	Hardware []string // every item must be offered by the node
	// Constraints are label constraints; all must match (see ParseConstraints).
	Constraints []Constraint
	// Node pins the sandbox to one node (create --node NAME).
	Node string
	// MilliCPU and MemoryBytes are what the sandbox is given.
	MilliCPU    int64
	MemoryBytes int64
	// Layers are the digests of the environment's layers, for image locality.
	Layers []string
}

func (r Request) resources() Resources {
	return Resources{Sandboxes: 1, MilliCPU: r.MilliCPU, MemoryBytes: r.MemoryBytes}
}

// check validates and normalises r unless ctx is already done.
func (r *Request) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return r.validate()
}

func (r *Request) validate() error {
	if r.Backend == "" {
		return errdefs.Invalid("placement: the request names no backend")
	}
	if r.MilliCPU < 0 || r.MemoryBytes < 0 {
		return errdefs.Invalid("placement: negative CPU (%d m) or memory (%d bytes)", r.MilliCPU, r.MemoryBytes)
	}
	cs, err := normalize(r.Constraints)
	if err != nil {
		return err
	}
	r.Constraints = cs
	return nil
}

// Decision is one placement: the node chosen and the in-flight charge it holds until
// Confirm, Release or Reject.
type Decision struct {
	// ID is unique within this engine (the in-flight entry's key).
	ID   uint64
	Node string
	// Attempt counts placements of this sandbox, 1 for the first.
	Attempt int
	// Rejected lists the nodes that already rejected this sandbox.
	Rejected []string
	// Candidates is how many nodes could take it when it was placed (1 for a
	// pinned request); the engine compared at most K of them.
	Candidates int
	req        Request
}

// Request returns the request the decision places (what the agent is asked to
// create).
func (d *Decision) Request() Request { return d.req }

// inflight is one placement counted on top of the snapshot.
type inflight struct {
	node        string
	res         Resources
	placedAt    time.Time
	confirmedAt time.Time // zero until Confirm
}

// nodeView is a snapshot node plus this engine's in-flight charges on it.
type nodeView struct {
	Node
	inflight Resources
	layers   map[string]struct{}
	// rejected: the node rejected a sandbox since this snapshot was taken. Such a
	// node looks emptier than it is (its rejected charge is gone), so placement
	// avoids it until the next snapshot unless nothing else fits.
	rejected bool
}

func (v *nodeView) load() Resources { return v.Load.add(v.inflight) }

// Stats counts what an engine did.
type Stats struct {
	Placements   int64 `json:"placements"`   // decisions handed out, re-placements included
	Rejections   int64 `json:"rejections"`   // Reject calls
	Replacements int64 `json:"replacements"` // decisions made after a rejection
	Exhausted    int64 `json:"exhausted"`    // resource_exhausted answers
	Refreshes    int64 `json:"refreshes"`
	Expired      int64 `json:"expired"` // in-flight entries dropped by InFlightTTL
}

// Engine places sandboxes on nodes. It is safe for concurrent use.
type Engine struct {
	cfg Config
	src Source

	mu       sync.Mutex
	nodes    []nodeView
	byName   map[string]int
	taken    time.Time // when the installed snapshot was requested
	inflight map[uint64]*inflight
	nextID   uint64
	rng      *rand.Rand
	buf      []int // feasible node indices, reused under mu

	placements, rejections, replacements, exhaustedN, refreshes, expired atomic.Int64
}

// New returns an engine over src. It has no nodes until the first Refresh.
func New(src Source, cfg Config) *Engine {
	cfg = cfg.withDefaults()
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	return &Engine{
		cfg:      cfg,
		src:      src,
		byName:   map[string]int{},
		inflight: map[uint64]*inflight{},
		rng:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	}
}

// Config returns the engine's configuration with defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats {
	return Stats{
		Placements: e.placements.Load(), Rejections: e.rejections.Load(),
		Replacements: e.replacements.Load(), Exhausted: e.exhaustedN.Load(),
		Refreshes: e.refreshes.Load(), Expired: e.expired.Load(),
	}
}

// InFlight returns how many placements are currently laid over the snapshot.
func (e *Engine) InFlight() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.inflight)
}

// Refresh takes a new snapshot from the source and lays the in-flight placements
// that it does not include yet over it. On error the previous snapshot stays.
func (e *Engine) Refresh(ctx context.Context) error {
	taken := time.Now()
	snap, err := e.src.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("placement: snapshot: %w", err)
	}
	nodes := make([]nodeView, len(snap))
	byName := make(map[string]int, len(snap))
	for i, n := range snap {
		if _, dup := byName[n.Name]; dup {
			return errdefs.Invalid("placement: snapshot lists node %q twice", n.Name)
		}
		byName[n.Name] = i
		if n.ObservedAt.IsZero() {
			n.ObservedAt = taken
		}
		v := nodeView{Node: n}
		if len(n.Layers) > 0 {
			v.layers = make(map[string]struct{}, len(n.Layers))
			for _, l := range n.Layers {
				v.layers[l] = struct{}{}
			}
		}
		nodes[i] = v
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if taken.Before(e.taken) {
		return nil // a concurrent Refresh already installed a newer snapshot
	}
	e.taken = taken
	for id, f := range e.inflight {
		i, ok := byName[f.node]
		switch {
		case !ok:
			delete(e.inflight, id) // the node left the cluster
		case !f.confirmedAt.IsZero() && !nodes[i].ObservedAt.Before(f.confirmedAt):
			delete(e.inflight, id) // the node's reported load includes it
		case f.confirmedAt.IsZero() && taken.Sub(f.placedAt) > e.cfg.InFlightTTL:
			delete(e.inflight, id)
			e.expired.Add(1)
		default:
			nodes[i].inflight = nodes[i].inflight.add(f.res)
		}
	}
	e.nodes, e.byName = nodes, byName
	e.refreshes.Add(1)
	return nil
}

// Watch refreshes every RefreshInterval until ctx ends. Errors are logged and the
// previous snapshot is kept.
func (e *Engine) Watch(ctx context.Context) {
	t := time.NewTicker(e.cfg.RefreshInterval)
	defer t.Stop()
	for {
		if err := e.Refresh(ctx); err != nil && ctx.Err() == nil {
			e.cfg.Logger.Warn("placement snapshot failed; keeping the previous one", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Place picks a node for one sandbox and charges it in flight.
func (e *Engine) Place(ctx context.Context, req Request) (*Decision, error) {
	if err := req.check(ctx); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.placeLocked(req, 1, nil)
}

// Confirm records that the node admitted the sandbox: the charge stays until a
// snapshot observed after now includes it.
func (e *Engine) Confirm(d *Decision) {
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if f, ok := e.inflight[d.ID]; ok && f.confirmedAt.IsZero() {
		f.confirmedAt = now
	}
}

// Release drops the decision's in-flight charge at once (the create failed, or the
// sandbox was deleted before a snapshot counted it).
func (e *Engine) Release(d *Decision) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.releaseLocked(d.ID)
}

func (e *Engine) releaseLocked(id uint64) {
	f, ok := e.inflight[id]
	if !ok {
		return
	}
	delete(e.inflight, id)
	if i, ok := e.byName[f.node]; ok {
		e.nodes[i].inflight = e.nodes[i].inflight.sub(f.res)
	}
}

// Reject records that d's node refused the sandbox (cause says why) and places it
// again on a node that has not rejected it. After MaxReplacements re-placements, or
// for a pinned request, the answer is resource_exhausted with Retry-After (a pinned
// request whose node is unavailable: the node's error).
func (e *Engine) Reject(ctx context.Context, d *Decision, cause error) (*Decision, error) {
	e.rejections.Add(1)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.releaseLocked(d.ID)
	if i, ok := e.byName[d.Node]; ok {
		e.nodes[i].rejected = true
	}
	rejected := append(slices.Clip(d.Rejected), d.Node)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if d.req.Node != "" && errdefs.Is(cause, api.CodeUnavailable) {
		// The one node it may go to did not answer (e.g. it died during the
		// create): the infrastructure's failure, not a lack of room.
		return nil, fmt.Errorf("placement: pinned to node %s: %w", d.Node, cause)
	}
	if d.req.Node != "" || d.Attempt > e.cfg.MaxReplacements {
		e.exhaustedN.Add(1)
		return nil, exhausted(e.cfg.RetryAfter, "placement: rejected by %d node(s) %v, giving up after %d attempt(s); last: %v",
			len(rejected), rejected, d.Attempt, cause)
	}
	nd, err := e.placeLocked(d.req, d.Attempt+1, rejected)
	if err != nil {
		return nil, fmt.Errorf("placement: after rejection by %v (%v): %w", rejected, cause, err)
	}
	e.replacements.Add(1)
	return nd, nil
}

// AdmitFunc asks d.Node's agent to take the sandbox. An error classified
// resource_exhausted (or unavailable) is a rejection and leads to a re-placement;
// any other error ends the placement.
type AdmitFunc func(ctx context.Context, d *Decision) error

// PlaceAndAdmit runs the whole loop: Place, admit, Reject and admit again on
// rejection, Confirm on success, Release on any other failure.
func (e *Engine) PlaceAndAdmit(ctx context.Context, req Request, admit AdmitFunc) (*Decision, error) {
	d, err := e.Place(ctx, req)
	for err == nil {
		aerr := admit(ctx, d)
		if aerr == nil {
			e.Confirm(d)
			return d, nil
		}
		if !IsRejection(aerr) {
			e.Release(d)
			return nil, aerr
		}
		d, err = e.Reject(ctx, d, aerr)
	}
	return nil, err
}

// IsRejection reports whether an admission error means "not on this node, try
// another": resource_exhausted or unavailable.
func IsRejection(err error) bool {
	return errdefs.Is(err, api.CodeResourceExhausted) || errdefs.Is(err, api.CodeUnavailable)
}

// placeLocked places one sandbox; e.mu is held.
func (e *Engine) placeLocked(req Request, attempt int, rejected []string) (*Decision, error) {
	res := req.resources()
	var idx int
	candidates := 1
	if req.Node != "" {
		i, err := e.pinnedLocked(req, res, rejected)
		if err != nil {
			return nil, err
		}
		idx = i
	} else {
		feasible := e.feasibleLocked(&req, res, rejected, true)
		if len(feasible) == 0 {
			feasible = e.feasibleLocked(&req, res, rejected, false)
		}
		if len(feasible) == 0 {
			return nil, e.noFitLocked(req, res, rejected)
		}
		candidates = len(feasible)
		idx = e.choose(feasible, &req)
	}
	n := &e.nodes[idx]
	n.inflight = n.inflight.add(res)
	e.nextID++
	id := e.nextID
	e.inflight[id] = &inflight{node: n.Name, res: res, placedAt: time.Now()}
	e.placements.Add(1)
	return &Decision{ID: id, Node: n.Name, Attempt: attempt, Rejected: rejected, Candidates: candidates, req: req}, nil
}
