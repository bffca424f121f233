// Package router is the cluster's router: a session.Service that places new
// sandboxes with the placement engine and sends every other call to the node
// its sandbox ID names (session.NodeOf), over the node RPC (internal/cluster/noderpc).
// The API server (internal/apiserver) serves the front ends in front of it.
//
// The router keeps no per-sandbox state. Its view of the nodes is a
// cluster.Watcher (etcd); a create is placed (placement.Engine: power-of-k over
// the watcher's snapshot plus this server's own in-flight placements), then
// admitted by the chosen node's agent, which may reject it (resource_exhausted,
// unavailable): the engine then places it elsewhere, a bounded number of
// times, and answers resource_exhausted with Retry-After when nothing fits. A
// create's request ID is claimed in etcd for the node it went to, so the same
// request retried through any API server reaches that node, which deduplicates
// it. A sandbox of a node whose lease expired answers node_lost until the node
// registers again.
package router
