package agent_test

import (
	"testing"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestMockStreamStartedFirst: a streaming exec's "started" comes before the
// output of a command that prints at once, every time.
func TestMockStreamStartedFirst(t *testing.T) {
	e := newMockEnv(t)
	m := e.open(t)
	sb := create(t, m, api.CreateSandboxRequest{})
	agenttest.CheckStartedFirst(t, m, sb.ID, agenttest.StartedFirstRuns)
}

// TestStreamStartedFirst is TestMockStreamStartedFirst through the container
// driver.
func TestStreamStartedFirst(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, nil)
	sb := create(t, m, api.CreateSandboxRequest{})
	agenttest.CheckStartedFirst(t, m, sb.ID, agenttest.StartedFirstRuns)
}
