package noderpc_test

import (
	"testing"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
)

// TestStreamStartedFirst: through the node RPC too, a streaming exec's
// "started" frame comes before the output of a command that prints at once.
func TestStreamStartedFirst(t *testing.T) {
	_, c, sb := mockSandbox(t)
	agenttest.CheckStartedFirst(t, c, sb.ID, agenttest.StartedFirstRuns)
}
