// Package placement is dsec's cluster placement engine (DSec §3): it picks the node a
// new sandbox goes to.
//
// The engine works on a Snapshot of the cluster that a Source delivers (in a cluster,
// a watcher over the node registry; here also MemSource for tests and benchmarks),
// refreshed periodically by Refresh or Watch, plus its own in-flight placements laid
// over it: every placement this engine made since the snapshot was taken counts in
// its node's load until a newer snapshot includes it (it was confirmed before that
// snapshot was observed) or it is released. Several engine instances (one per API
// server) therefore need no coordination: each sees what every node reports plus
// what it placed itself, and the node's own admission check settles the rest.
//
// A placement is Filter, then Rank:
//   - Filter keeps nodes that are ready (not draining or lost), offer the request's
//     backend and hardware, match every label constraint (key=value), are the pinned
//     node if one is named, have not rejected this request already, and have room
//     for one more sandbox with the request's CPU and memory.
//   - Rank samples k of the feasible nodes uniformly (power-of-k choices, k = 2 by
//     default) and takes the least loaded by Score: the largest of the utilisation
//     fractions (sandboxes, CPU, memory; committed plus in flight, over capacity). A
//     sampled node whose score is within Config.TieTolerance of the least loaded
//     sample ties with it; among tied nodes the one that already mounts the most of
//     the request's layers wins (image locality), then the lower score, then the
//     first sampled.
//
// The node's agent keeps the final say: a caller whose node rejected the sandbox calls
// Reject, and the engine places it again excluding every node that rejected it, at
// most Config.MaxReplacements times. A node that rejected anything is avoided by
// every placement until the next snapshot (unless nothing else fits): its rejected
// charges are gone, so it would otherwise look emptier than it is. When nothing fits the error is classified
// resource_exhausted and carries a Retry-After duration (see RetryAfter); the engine
// never blocks waiting for room. PlaceBatch places N sandboxes all or nothing.
//
// The package depends on no server or agent code; the cluster wiring (etcd watcher,
// API servers, agents over RPC) plugs in through Source and the Decision lifecycle
// (Place → agent admits → Confirm, or → agent rejects → Reject; Release on failure).
package placement
