package apiserver

import (
	"log/slog"

	"github.com/dsec-dev/dsec/internal/frontend/e2b"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/buildstate"
	"github.com/dsec-dev/dsec/internal/frontend/sandboxfusion"
	"github.com/dsec-dev/dsec/internal/session"
)

// The other front ends over the router, as `dsec server` serves them over its
// node: E2B's API (control plane and envd) and SandboxFusion's /run_code and
// /submit, with the cluster's API tokens.

// newE2B returns E2B's front end over svc. Its envd access tokens are keyed
// with the cluster secret, so every API server accepts the ones any of them
// handed out; sandbox deadlines are the nodes', so nothing is re-armed;
// template builds are in the cluster's store (builds), so any API server
// answers their status, logs and uploads.
func newE2B(svc session.Service, authorize func(string) bool, secret []byte, domain string, builds buildstate.Store, log *slog.Logger) *e2b.Handler {
	return e2b.New(svc, e2b.Options{Authorize: authorize, Secret: secret, Logger: log, Domain: domain, Builds: builds})
}

func (a *APIServer) sandboxFusion() *sandboxfusion.Handler {
	return sandboxfusion.New(a.svc, // counted like /v1's; the router places them on nodes with FnCall pools
		sandboxfusion.Options{Logger: a.log, Sandboxes: a.svc})
}
