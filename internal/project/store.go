package project

import (
	"context"

	"github.com/dsec-dev/dsec/pkg/api"
)

// Store is the projects' state. Every method is safe for concurrent use, and
// across processes sharing the state (API servers on one etcd).
type Store interface {
	// Identify returns the project token belongs to (ok false: no such
	// token). It answers from memory: it is called on every request.
	Identify(token string) (project string, ok bool)
	// Limits returns project's quota from memory (ok false: no such project;
	// DefaultProject always exists).
	Limits(project string) (q Quota, ok bool)

	// Create makes a project with one new token, which it returns
	// (already_exists if the name is taken).
	Create(ctx context.Context, name string, q Quota) (token string, err error)
	Get(ctx context.Context, name string) (Info, error)
	List(ctx context.Context) ([]Info, error)
	// Delete removes a project, its tokens and its reservations; the default
	// project cannot be removed, and one with reserved usage is a conflict.
	Delete(ctx context.Context, name string) error
	SetQuota(ctx context.Context, name string, q Quota) error
	AddToken(ctx context.Context, name string) (token string, err error)
	// RemoveToken removes the token whose ID (TokenID) is id; the default
	// project's last token cannot be removed.
	RemoveToken(ctx context.Context, name, id string) error

	// SetRegistryAuth stores (adds or replaces) project name's credentials
	// for registry host (CheckRegistryHost; both fields non-empty).
	SetRegistryAuth(ctx context.Context, name, host string, a api.RegistryAuth) error
	// RemoveRegistryAuth removes them (not_found when the project has none
	// for host).
	RemoveRegistryAuth(ctx context.Context, name, host string) error
	// RegistryAuth returns project's registry credentials by host from
	// memory (nil: none): it is called on every create. The caller must not
	// change the map.
	RegistryAuth(project string) map[string]api.RegistryAuth

	// Reserve adds reservation r (r.ID unused) and raises the project's usage
	// by r.Usage, atomically, if the project's quota allows; otherwise it
	// returns quota_exceeded and changes nothing.
	Reserve(ctx context.Context, project string, r Reservation) error
	// Release lowers reservation id by one member's usage (removing it when no
	// member is left) and the project's usage with it; an unknown id is a
	// no-op.
	Release(ctx context.Context, project, id string, member Usage) error
	// Reservations lists project's reservations with their versions.
	Reservations(ctx context.Context, project string) ([]Reservation, error)
	// Adjust replaces reservation old (old.Version 0: absent) with next
	// (next.Usage.Sandboxes 0: removed) and moves the project's usage by the
	// difference, if old is still current; otherwise conflict. Reconcile uses it.
	Adjust(ctx context.Context, project string, old, next Reservation) error
}
