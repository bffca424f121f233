package noderpc_test

import (
	"testing"

	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/session/sessiontest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// The session service's conformance suite through the API tier's request
// validation (session.Validating: the node RPC trusts its caller's) → Client →
// HTTP/2 → handler → a real node agent over the container driver (root, the
// default image).
func TestConformanceContainer(t *testing.T) {
	m := containerAgent(t)
	c := serve(t, m, noderpcOpts()).client(t, nil)
	sessiontest.Run(t, session.Chain(c, session.Validating(nil)), sessiontest.Options{
		Create: api.CreateSandboxRequest{Backend: api.BackendContainer, MemoryBytes: 256 << 20},
		Pause:  true,
		TTY:    true,
	})
	if list, _ := m.List(ctxT(t)); len(list) != 0 {
		t.Errorf("%d sandboxes left on the node after the suite", len(list))
	}
}
