// Package agenttest is the session service tests share when they need a node
// but no isolation: a real node agent (package agent) over the mock driver,
// with a tiny image, as any user and without built images. Front ends, the
// node RPC, the cluster router and the decorators test against it instead of
// hand-written fakes, so what they see is what a node answers. NewRootedNode
// (as root) runs the processes chrooted with their credentials, for tests of
// users, homes and in-sandbox paths.
package agenttest

import (
	"context"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/mock"
	"github.com/dsec-dev/dsec/internal/image/imagestest"
)

// Options adjust the node; the zero value is a node named "mock-node" with one
// mock driver on a host of its own.
type Options struct {
	// Node is the node's name.
	Node string
	// Driver replaces the mock driver (e.g. a mock wrapped to inject faults).
	Driver driver.Driver
	// Config, when set, edits the agent's configuration before it starts.
	Config func(*agent.Config)
}

// Mock returns a mock driver on a host of its own, its state under the test's
// temporary directory.
func Mock(t testing.TB) driver.Driver { return MockWith(t, mock.Config{}) }

// MockWith returns a mock driver configured by cfg; an unset Host is a host of
// its own and an unset StateDir the test's temporary directory. A sandbox's
// root on the host is filepath.Join(cfg.StateDir, its ID).
func MockWith(t testing.TB, cfg mock.Config) driver.Driver {
	t.Helper()
	if cfg.Host == nil {
		cfg.Host = mock.NewHost()
	}
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	d, err := mock.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// New starts a node agent over the mock driver. When the test ends it deletes
// every sandbox the node still has (an error fails the test) and closes it.
func New(t testing.TB, o Options) *agent.Manager {
	t.Helper()
	if o.Node == "" {
		o.Node = "mock-node"
	}
	if o.Driver == nil {
		o.Driver = Mock(t)
	}
	cfg := agent.Config{DataDir: t.TempDir(), Driver: o.Driver, Images: imagestest.Tiny(t), Node: o.Node}
	if o.Config != nil {
		o.Config(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := agent.New(ctx, cfg)
	if err != nil {
		t.Fatalf("agent.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := m.DeleteAll(ctx); err != nil {
			t.Errorf("DeleteAll: %v", err)
		}
		m.Close()
	})
	return m
}
