package agent_test

import (
	"testing"

	"github.com/dsec-dev/dsec/internal/session/sessiontest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// The node agent over the real container driver, under the request
// validation as every role composes it, passes the session service's
// conformance suite (root, the default image).
func TestSessionConformance(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, nil)
	sessiontest.Run(t, validated(m), sessiontest.Options{
		Create: api.CreateSandboxRequest{Backend: api.BackendContainer, MemoryBytes: 256 << 20},
		Pause:  true,
		TTY:    true,
	})
	e.requireEmpty(t, m, "after the suite")
}
