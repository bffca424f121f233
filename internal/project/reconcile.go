package project

import (
	"context"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Reconcile makes the reservations of every project that has a quota (or
// still holds reservations) match the sandboxes the nodes report (see the
// package doc). Conflicts with concurrent creates and deletes are left for
// the next round.
func (g *Guard) Reconcile(ctx context.Context) error {
	infos, err := g.store.List(ctx)
	if err != nil {
		return err
	}
	var names []string
	for _, in := range infos {
		if in.Quota.Limited() || in.Usage.Sandboxes > 0 {
			names = append(names, in.Name)
		}
	}
	return g.reconcile(ctx, names)
}

// ReconcileProject reconciles one project (after its quota was set).
func (g *Guard) ReconcileProject(ctx context.Context, name string) error {
	return g.reconcile(ctx, []string{name})
}

func (g *Guard) reconcile(ctx context.Context, names []string) error {
	if len(names) == 0 {
		return nil
	}
	// Reservations first, then the nodes: a reservation bound to a sandbox
	// before this snapshot has its sandbox on a node by the time of the list.
	snap := make(map[string]map[string]Reservation, len(names))
	for _, p := range names {
		rs, err := g.store.Reservations(ctx, p)
		if err != nil {
			return err
		}
		m := make(map[string]Reservation, len(rs))
		for _, r := range rs {
			m[r.ID] = r
		}
		snap[p] = m
	}
	all, err := g.Service.List(ctx)
	if err != nil {
		return err
	}
	seen := make(map[string]map[string]Usage, len(names))
	for _, sb := range all {
		o := g.remember(sb)
		if _, ok := snap[o.project]; !ok {
			continue
		}
		if seen[o.project] == nil {
			seen[o.project] = map[string]Usage{}
		}
		seen[o.project][o.rid] = seen[o.project][o.rid].Add(o.use)
	}
	now := time.Now()
	for _, p := range names {
		q, _ := g.store.Limits(p)
		for rid, have := range snap[p] {
			got := seen[p][rid]
			grow := got.Sandboxes > have.Usage.Sandboxes
			old := now.Sub(have.CreatedAt) > g.Grace && got != have.Usage
			if !grow && !old {
				continue
			}
			g.adjust(ctx, p, have, Reservation{ID: rid, Usage: got, CreatedAt: have.CreatedAt})
		}
		if !q.Limited() {
			continue // nothing new is adopted for a project without limits
		}
		for rid, got := range seen[p] {
			if _, ok := snap[p][rid]; !ok {
				g.adjust(ctx, p, Reservation{ID: rid}, Reservation{ID: rid, Usage: got, CreatedAt: now.UTC()})
			}
		}
	}
	return nil
}

func (g *Guard) adjust(ctx context.Context, p string, old, next Reservation) {
	err := g.store.Adjust(ctx, p, old, next)
	switch {
	case err == nil:
		g.log.Info("quota reservation reconciled", "project", p, "reservation", old.ID,
			"sandboxes_before", old.Usage.Sandboxes, "sandboxes_after", next.Usage.Sandboxes)
	case errdefs.Is(err, api.CodeConflict):
	default:
		g.log.Warn("reconciling a quota reservation failed", "project", p, "reservation", old.ID, "err", err)
	}
}

// Run reconciles every interval until ctx ends.
func (g *Guard) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := g.Reconcile(ctx); err != nil && ctx.Err() == nil {
			g.log.Warn("quota reconcile round failed", "err", err)
		}
	}
}
