package agent_test

import (
	"path/filepath"
	"testing"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/trajectory"
	"github.com/dsec-dev/dsec/internal/trajectory/trajtest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// The trajectory decorator over the node agent with the real container driver
// passes the decorator's conformance suite (root, the default image) on the
// node's default store; agenttest.Faults counts what ran and injects failures
// (fresh for each test), and FnCalls get the suite's engine (the agent serves
// none itself).
func TestTrajectoryConformance(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, nil)
	trajtest.Run(t, trajtest.Harness{
		Service: func(*testing.T) session.Service {
			f := &agenttest.Faults{}
			return faultyAgent{session.Chain(m, f.Interceptor(), agenttest.FnCalls(trajtest.FnCall)), f}
		},
		Runs:   func(svc session.Service) int { return svc.(faultyAgent).f.Runs() },
		Fail:   func(svc session.Service, method string, err error) { svc.(faultyAgent).f.FailNext(method, 1, err) },
		FnCall: true,
		Store: func(t *testing.T) trajectory.Store {
			s, err := trajectory.OpenPebble(filepath.Join(t.TempDir(), "trajectories"), trajectory.PebbleOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		Restart: func(t *testing.T, s trajectory.Store) trajectory.Store {
			p := s.(*trajectory.Pebble).Path()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			n, err := trajectory.OpenPebble(p, trajectory.PebbleOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { n.Close() })
			return n
		},
		Create: api.CreateSandboxRequest{Backend: api.BackendContainer, MemoryBytes: 256 << 20},
	})
	e.requireEmpty(t, m, "after the suite")
}

// faultyAgent is the agent below a test's Faults.
type faultyAgent struct {
	session.Service
	f *agenttest.Faults
}
