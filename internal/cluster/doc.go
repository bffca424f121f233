// Package cluster is dsec's shared cluster state, kept in etcd (never a home-made
// consensus layer): the node registry, the drain flags, the API tokens every API
// server accepts, and the request-ID claims that make creates idempotent across
// API servers. It also runs an embedded etcd member (`dsec etcd`).
//
// Layout under the key prefix (default "/dsec/"):
//
//	n/live/NAME    the node's signed record, under the node's lease (TTL 10 s by
//	               default): it disappears when the agent stops renewing it
//	n/known/NAME   the same record without a lease: a node that is known but not
//	               live is lost, so its sandboxes answer node_lost, not not_found
//	n/drain/NAME   present: the node takes no new sandboxes
//	tokens/SHA256  an API token's digest (the token itself is never stored) and
//	               its project (none: the default project)
//	projects/NAME  a project's quota (internal/project); the default project
//	               exists without a record
//	quota/NAME/usage    the project's reserved usage: the sum of its reservations
//	quota/NAME/r/RID    one reservation (a create, batch or fork); every change
//	                    to one is a transaction that moves usage with it
//	req/SHA256     a create request ID's claim: the node it was placed on
//	elect/TASK/ID  a candidate of an election (RunElected, etcd's concurrency
//	               recipe under the candidate's session lease); the oldest leads
//	               (the quota reconciler runs on one API server at a time)
//
// Trust: agents sign their records with HMAC-SHA256 under the cluster secret
// (--cluster-secret-file); a Watcher ignores any record that does not verify, so
// an agent with the wrong secret is never placed on or routed to, whatever it
// wrote. The same secret authenticates the API servers' RPCs to the agents
// (internal/cluster/noderpc).
//
// A Watcher lists and then watches the n/ keys; it is the API server's view of
// the nodes and the placement engine's Source (placement.Source), stamping each
// node's load with the time its report arrived.
package cluster
