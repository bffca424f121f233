// Package apiserver is dsec's stateless API tier for a cluster (`dsec apiserver`):
// dsec's front ends (internal/frontend/v1, E2B, SandboxFusion, the dashboard) in
// front of the cluster router (internal/cluster/router), through the API tier's
// interceptors (metrics, batch counter, project guard). It wires the router to
// etcd (node watcher, request-ID claims, node admin), serves /v1/images from the
// environments in etcd, and reports the router's placement work as metrics.
// The stepwise start-up of the `dsec apiserver` role is internal/app/apiserver.
package apiserver
