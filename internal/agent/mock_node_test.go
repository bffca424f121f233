package agent_test

import (
	"testing"

	"github.com/dsec-dev/dsec/pkg/api"
)

// A create that names a node or label constraints came straight to this node
// (a cluster's API server forwards neither): its own name is fine, anything
// else is refused rather than ignored.
func TestMockCreateNodeAndConstraints(t *testing.T) {
	e := newMockEnv(t)
	m := e.open(t, e.driver(t, "", false))
	defer m.Close()
	_, err := m.Create(ctxT(t), api.CreateSandboxRequest{Node: "elsewhere"})
	wantCode(t, "another node", err, api.CodeInvalidArgument)
	_, err = m.Create(ctxT(t), api.CreateSandboxRequest{Constraints: map[string]string{"zone": "a"}})
	wantCode(t, "label constraints", err, api.CodeInvalidArgument)
	create(t, m, api.CreateSandboxRequest{Node: "test"})
}
