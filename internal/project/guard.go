package project

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/auth"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// maxOwners bounds the sandbox → project cache (half is dropped when full).
const maxOwners = 1 << 18

// Guard is the session.Service decorator that enforces projects: quotas on
// Create, CreateBatch and Fork, releases on Delete, project scoping, and the
// project's registry credentials on Create and CreateBatch (see the package
// doc). It passes the optional session interfaces through.
type Guard struct {
	session.Service // the guarded service (Exec, files ... pass through)
	store           Store
	log             *slog.Logger
	// Grace is how old a reservation must be before Reconcile shrinks it to
	// what the nodes report (creates in flight are younger).
	Grace time.Duration

	mu     sync.Mutex
	owners map[string]owner // sandbox ID → owner (IDs are never reused)
}

// owner is what the guard knows about a sandbox.
type owner struct {
	project, rid string
	use          Usage
}

// NewGuard returns inner guarded by st.
func NewGuard(inner session.Service, st Store, log *slog.Logger) *Guard {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Guard{Service: inner, store: st, log: log, Grace: 10 * time.Minute, owners: map[string]owner{}}
}

var _ session.Service = (*Guard)(nil)

// Info adds the project group to the guarded service's.
func (g *Guard) Info(ctx context.Context) (api.Info, error) {
	info, err := g.Service.Info(ctx)
	if err != nil {
		return info, err
	}
	return session.WithServices(info, api.ServiceProjects), nil
}

// Interceptor returns g as a session.Interceptor (for session.Chain). g keeps
// guarding the service it was made with (NewGuard: its reconciler may already
// run), so it goes last in the chain, right above that same base service.
func (g *Guard) Interceptor() session.Interceptor {
	return func(session.Service) session.Service { return g }
}

// Store is the guard's store.
func (g *Guard) Store() Store { return g.store }

// caller is ctx's project (Default for calls from inside dsec).
func caller(ctx context.Context) string {
	if p := auth.ProjectOf(ctx); p != "" {
		return p
	}
	return Default
}

// ownerOf reads a sandbox's owner from its labels.
func ownerOf(sb api.Sandbox) owner {
	o := owner{project: sb.Labels[api.LabelProject], rid: sb.Labels[api.LabelReservation], use: UsageOfSandbox(sb)}
	if o.project == "" {
		o.project = Default
	}
	if o.rid == "" {
		o.rid = adoptedID(sb.ID)
	}
	return o
}

// adoptedID is the reservation an unlabelled sandbox is counted under.
func adoptedID(id string) string { return "sb:" + id }

func (g *Guard) remember(sb api.Sandbox) owner {
	o := ownerOf(sb)
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.owners) >= maxOwners {
		n := 0
		for id := range g.owners {
			delete(g.owners, id)
			if n++; n >= maxOwners/2 {
				break
			}
		}
	}
	g.owners[sb.ID] = o
	return o
}

func (g *Guard) forget(id string) {
	g.mu.Lock()
	delete(g.owners, id)
	g.mu.Unlock()
}

// owner returns sandbox id's owner, from the cache or the sandbox itself.
func (g *Guard) owner(ctx context.Context, id string) (owner, error) {
	g.mu.Lock()
	o, ok := g.owners[id]
	g.mu.Unlock()
	if ok {
		return o, nil
	}
	sb, err := g.Service.Get(ctx, id)
	if err != nil {
		return owner{}, err
	}
	return g.remember(sb), nil
}

func notFound(id string) error { return errdefs.NotFound("sandbox %q not found", id) }

// Authorize answers not_found unless sandbox id belongs to ctx's project (the
// HTTP layer calls it for every /v1/sandboxes/{id} route).
//
// A sandbox that no longer exists is let through: the call itself answers
// not_found, or, for a step of a trajectory, the trajectory log answers it from
// the log (a re-issued step of a deleted sandbox is replayed, not refused).
func (g *Guard) Authorize(ctx context.Context, id string) error {
	o, err := g.owner(ctx, id)
	if errdefs.Is(err, api.CodeNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if o.project != caller(ctx) {
		return notFound(id)
	}
	return nil
}

// reserve reserves u for project p; "" when p has no limits (nothing reserved).
func (g *Guard) reserve(ctx context.Context, p string, u Usage) (string, error) {
	// A project this process has not seen yet (its record's watch event may
	// trail its token's) is reserved for: the store knows.
	if q, ok := g.store.Limits(p); ok && !q.Limited() {
		return "", nil
	}
	rid := NewReservationID()
	if err := g.store.Reserve(ctx, p, Reservation{ID: rid, Usage: u, CreatedAt: time.Now().UTC()}); err != nil {
		return "", err
	}
	return rid, nil
}

// release gives back u of reservation rid (it outlives ctx: a cancelled
// create still releases).
func (g *Guard) release(ctx context.Context, p, rid string, u Usage) {
	if rid == "" || u.Sandboxes <= 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := g.store.Release(rctx, p, rid, u); err != nil {
		g.log.Warn("releasing a quota reservation failed; the reconciler will", "project", p, "reservation", rid, "err", err)
	}
}

// labelled returns labels with the project's and reservation's set: a
// caller's own values are dropped, and a default-project sandbox without a
// reservation carries neither (as before projects existed). fork keeps an
// empty reservation label so the children do not inherit the parent's.
func labelled(labels map[string]string, p, rid string, fork bool) map[string]string {
	out := make(map[string]string, len(labels)+2)
	maps.Copy(out, labels)
	delete(out, api.LabelProject)
	delete(out, api.LabelReservation)
	if p != Default {
		out[api.LabelProject] = p
	}
	if rid != "" || fork {
		out[api.LabelReservation] = rid
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// withRegistryAuth returns req carrying project p's registry credentials for
// every host req does not name itself (a caller's own win for their hosts);
// the caller's map is copied, never changed.
func (g *Guard) withRegistryAuth(p string, req api.CreateSandboxRequest) api.CreateSandboxRequest {
	mine := g.store.RegistryAuth(p)
	if len(mine) == 0 {
		return req
	}
	named := make(map[string]bool, len(req.RegistryAuth))
	for h := range req.RegistryAuth {
		named[RegistryHost(h)] = true
	}
	out := maps.Clone(req.RegistryAuth)
	for h, a := range mine {
		if !named[h] {
			if out == nil {
				out = make(map[string]api.RegistryAuth, len(mine))
			}
			out[h] = a
		}
	}
	req.RegistryAuth = out
	return req
}

func (g *Guard) Create(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	p, u := caller(ctx), UsageOf(req)
	req = g.withRegistryAuth(p, req)
	rid, err := g.reserve(ctx, p, u)
	if err != nil {
		// A retry of a create that was answered needs no new room.
		if sbs, ok := g.answered(ctx, p, []api.CreateSandboxRequest{req}, err); ok {
			return sbs[0], nil
		}
		return api.Sandbox{}, err
	}
	req.Labels = labelled(req.Labels, p, rid, false)
	sb, err := g.Service.Create(ctx, req)
	if errdefs.Is(err, api.CodeStartFailed) {
		// The sandbox exists (kept for inspection) and holds the reservation
		// by its label: Delete releases it.
		return api.Sandbox{}, err
	}
	if err != nil {
		g.release(ctx, p, rid, u)
		return api.Sandbox{}, err
	}
	if sb.Labels[api.LabelReservation] != rid {
		// A retried request ID: the sandbox made the first time holds its own.
		g.release(ctx, p, rid, u)
	}
	if o := g.remember(sb); o.project != p {
		return api.Sandbox{}, otherProjectsRequest(req.RequestID)
	}
	return sb, nil
}

func otherProjectsRequest(id string) error {
	return errdefs.Conflict("request_id %q was used by another project's create; choose another request ID", id)
}

// RequestFinder finds the live sandboxes that answered create request IDs (the
// cluster's router asks the node holding each ID's claim). A service without
// it is asked for its whole list.
type RequestFinder interface {
	// FindRequests returns the live sandbox of each request ID that has one.
	FindRequests(ctx context.Context, ids []string) (map[string]api.Sandbox, error)
}

// answered returns the sandboxes that already answered every one of reqs,
// when a create was refused with refusal quota_exceeded: a request ID retried
// (a create, or a batch re-sent whole) gets its sandboxes back even when the
// project is at its quota now. ok is false unless every request has an ID
// answered by a live sandbox of project p.
func (g *Guard) answered(ctx context.Context, p string, reqs []api.CreateSandboxRequest, refusal error) ([]api.Sandbox, bool) {
	if !errdefs.Is(refusal, api.CodeQuotaExceeded) || len(reqs) == 0 {
		return nil, false
	}
	ids := make([]string, len(reqs))
	for i, r := range reqs {
		if r.RequestID == "" {
			return nil, false
		}
		ids[i] = r.RequestID
	}
	var found map[string]api.Sandbox
	if f, ok := g.Service.(RequestFinder); ok {
		m, err := f.FindRequests(ctx, ids)
		if err != nil {
			g.log.Warn("quota: looking up a retried create's request IDs", "project", p, "err", err)
			return nil, false
		}
		found = m
	} else {
		all, err := g.Service.List(ctx)
		if err != nil {
			g.log.Warn("quota: looking up a retried create's request IDs", "project", p, "err", err)
			return nil, false
		}
		found = make(map[string]api.Sandbox, len(ids))
		for _, sb := range all {
			if sb.RequestID != "" {
				found[sb.RequestID] = sb
			}
		}
	}
	out := make([]api.Sandbox, len(ids))
	for i, id := range ids {
		sb, ok := found[id]
		if !ok || g.remember(sb).project != p {
			return nil, false
		}
		out[i] = sb
	}
	return out, true
}

// CreateBatch: the whole batch is one reservation, made before anything is
// placed.
func (g *Guard) CreateBatch(ctx context.Context, reqs []api.CreateSandboxRequest) ([]api.Sandbox, error) {
	p := caller(ctx)
	var total Usage
	for _, r := range reqs {
		total = total.Add(UsageOf(r))
	}
	rid, err := g.reserve(ctx, p, total)
	if err != nil {
		if sbs, ok := g.answered(ctx, p, reqs, err); ok { // the batch re-sent whole
			return sbs, nil
		}
		return nil, err
	}
	reqs = slices.Clone(reqs)
	for i := range reqs {
		reqs[i] = g.withRegistryAuth(p, reqs[i])
		reqs[i].Labels = labelled(reqs[i].Labels, p, rid, false)
	}
	out, err := g.Service.CreateBatch(ctx, reqs)
	if errdefs.Is(err, api.CodeStartFailed) {
		// One member is kept (its start failed) and holds the reservation
		// by its label: the reconciler shrinks the reservation to it.
		return nil, err
	}
	if err != nil {
		g.release(ctx, p, rid, total)
		return nil, err
	}
	var foreign string
	for i, sb := range out {
		if sb.Labels[api.LabelReservation] != rid {
			g.release(ctx, p, rid, UsageOf(reqs[i]))
		}
		if g.remember(sb).project != p && foreign == "" {
			foreign = reqs[i].RequestID
		}
	}
	if foreign != "" { // all or nothing: the members made now go again
		for _, sb := range out {
			if sb.Labels[api.LabelReservation] == rid && g.Delete(ctx, sb.ID) != nil {
				g.log.Warn("batch with another project's request ID: removing a member failed; the reconciler will count it", "id", sb.ID)
			}
		}
		return nil, otherProjectsRequest(foreign)
	}
	return out, nil
}

func (g *Guard) Get(ctx context.Context, id string) (api.Sandbox, error) {
	sb, err := g.Service.Get(ctx, id)
	if err != nil {
		return sb, err
	}
	if g.remember(sb).project != caller(ctx) {
		return api.Sandbox{}, notFound(id)
	}
	return sb, nil
}

// List implements session.Service: the caller's project's sandboxes.
func (g *Guard) List(ctx context.Context) ([]api.Sandbox, error) {
	all, err := g.Service.List(ctx)
	if err != nil {
		return nil, err
	}
	p := caller(ctx)
	out := all[:0:0]
	for _, sb := range all {
		if g.remember(sb).project == p {
			out = append(out, sb)
		}
	}
	return out, nil
}

func (g *Guard) Delete(ctx context.Context, id string) error {
	o, err := g.owner(ctx, id)
	if err != nil {
		return err
	}
	if o.project != caller(ctx) {
		return notFound(id)
	}
	err = g.Service.Delete(ctx, id)
	if err == nil || errdefs.Is(err, api.CodeNotFound) {
		g.release(ctx, o.project, o.rid, o.use)
		g.forget(id)
	}
	return err
}

// Fork: the children are reserved like a batch.
func (g *Guard) Fork(ctx context.Context, id string, req api.ForkRequest) (api.ForkResult, error) {
	o, err := g.owner(ctx, id)
	if err != nil {
		return api.ForkResult{}, err
	}
	p := caller(ctx)
	if o.project != p {
		return api.ForkResult{}, notFound(id)
	}
	child := o.use
	ov := api.CreateSandboxRequest{}
	if req.Overrides != nil {
		ov = *req.Overrides
	}
	if ov.CPU > 0 {
		child.MilliCPU = int64(ov.CPU*1000 + 0.5)
	}
	if ov.MemoryBytes > 0 {
		child.MemoryBytes = ov.MemoryBytes
	}
	n := int64(max(req.Count, 0))
	total := Usage{Sandboxes: n * child.Sandboxes, MilliCPU: n * child.MilliCPU, MemoryBytes: n * child.MemoryBytes}
	rid, err := g.reserve(ctx, p, total)
	if err != nil {
		return api.ForkResult{}, err
	}
	ov.Labels = labelled(ov.Labels, p, rid, true)
	req.Overrides = &ov
	res, err := g.Service.Fork(ctx, id, req)
	if err != nil {
		g.release(ctx, p, rid, total)
		return res, err
	}
	for _, c := range res.Children {
		g.remember(c)
	}
	for i := int64(len(res.Children)); i < n; i++ {
		g.release(ctx, p, rid, child)
	}
	return res, nil
}

// The other methods pass through (the embedded Service); the HTTP layer has
// authorized the ID already.
