// Package project is dsec's projects and quotas: API tokens name a project, and a
// project's quotas (live sandboxes, total CPU, total memory) bound what its
// tokens may create.
//
// State lives behind Store, with two implementations that pass one conformance
// suite (projecttest): cluster.Projects keeps it in etcd, so every API server
// enforces the same quotas with no coordination but etcd's transactions; Local
// keeps it in one process for `dsec server`.
//
// Enforcement (Guard, a session.Service decorator):
//
//   - A create reserves its usage before placement: Store.Reserve adds a
//     reservation and raises the project's usage in one compare-and-swap, so
//     two API servers racing for the last slot cannot both win. A batch is one
//     reservation of N members (all or nothing); a fork reserves its children.
//   - The reservation's ID is stored on each sandbox as the label
//     dsec.reservation (and the project as dsec.project), so the nodes' own
//     sandbox lists say which reservation every live sandbox holds.
//   - Delete releases one member at once. Everything else that ends a sandbox
//     without a delete through the API (TTL and idle expiry, a lost node that
//     never returns, a create whose answer was lost) is caught by the
//     reconciler (Reconcile): it lists the nodes' sandboxes, shrinks every
//     reservation older than a grace period to the members the nodes report
//     (deleting empty ones), grows reservations whose sandboxes the nodes
//     report more of (a lost node that came back), and adopts labelled
//     sandboxes whose reservation is gone. Each change is again a
//     compare-and-swap on the reservation and the usage together.
//   - A project without any limit reserves nothing (no store write per
//     create); setting a quota reconciles that project at once, adopting its
//     live sandboxes.
//   - Sandboxes are scoped to their project: List filters by the label and
//     Authorize (called by the HTTP layer for every /v1/sandboxes/{id} route)
//     answers not_found for another project's sandbox. A sandbox without the
//     label (made before projects existed) belongs to DefaultProject.
//   - A create (or a batch re-sent whole) whose request IDs were already
//     answered gets those sandboxes back even at the quota (RequestFinder);
//     another project's request ID is a conflict.
//   - Trajectories are scoped too: each project has its own trajectory IDs
//     (TrajectoryKey; Trajectories scopes the trajectory API).
//   - A project's registry credentials (Store.SetRegistryAuth) are added to
//     its creates and batches for each host the request's own registry_auth
//     does not name; they are shown as hosts only (Info.Registries).
package project
