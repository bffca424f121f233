package agenttest

import (
	"path/filepath"
	"testing"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/mock"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Node is the session service a front end's tests serve: a node agent over a
// mock driver that can pause and calls its backend "container" (the name the
// API documents list), below a Recorder.
type Node struct {
	// Service is the recorder over the agent: serve this.
	session.Service
	*Recorder
	// Agent is the node agent itself.
	Agent *agent.Manager
	roots string
}

// NewNode starts a Node. wrap, if given, wraps the mock driver (e.g. in
// FailStart).
func NewNode(t testing.TB, wrap ...func(driver.Driver) driver.Driver) *Node {
	t.Helper()
	n := &Node{Recorder: &Recorder{}, roots: t.TempDir()}
	drv := MockWith(t, mock.Config{StateDir: n.roots, Pause: true, BackendName: api.BackendContainer})
	for _, w := range wrap {
		drv = w(drv)
	}
	n.Agent = New(t, Options{Driver: drv})
	n.Service = session.Chain(n.Agent, n.Recorder.Interceptor())
	return n
}

// Root is sandbox id's root directory on the host: what its processes and its
// files see as "/".
func (n *Node) Root(id string) string { return filepath.Join(n.roots, id) }
