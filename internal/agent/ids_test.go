package agent_test

import (
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/backend/container"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// New sandboxes are named after their node; a sandbox with an ID of the old form
// (no node, as agents made before node names) is re-adopted after a restart and
// served like any other.
func TestIDsNameTheirNode(t *testing.T) {
	e := newEnv(t)
	m1 := e.open(t, func(c *agent.Config) { c.Node = "node-a" })
	info, err := m1.Info(ctxT(t))
	if err != nil || info.Node != "node-a" {
		t.Fatalf("Info: %+v, %v", info, err)
	}
	sb := create(t, m1, api.CreateSandboxRequest{})
	if node, ok := session.NodeOf(sb.ID); !ok || node != "node-a" {
		t.Fatalf("new ID %q names node %q (%v), want node-a", sb.ID, node, ok)
	}
	agent.SetIDs(m1, func() string {
		var b [8]byte
		_, _ = rand.Read(b[:])
		return "sb-" + hex.EncodeToString(b[:])
	})
	old := create(t, m1, api.CreateSandboxRequest{})
	if _, ok := session.NodeOf(old.ID); ok {
		t.Fatalf("old-style ID %q parsed as naming a node", old.ID)
	}
	shOK(t, m1, old.ID, "echo before > /root/f")
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}

	m2 := e.open(t, func(c *agent.Config) { c.Node = "node-a" })
	for _, id := range []string{sb.ID, old.ID} {
		if got, err := m2.Get(ctxT(t), id); err != nil || got.State != api.StateRunning {
			t.Fatalf("re-adopted %s: %+v, %v", id, got, err)
		}
	}
	if out := shOK(t, m2, old.ID, "cat /root/f; hostname"); out != "before\n"+old.ID+"\n" {
		t.Fatalf("old-style sandbox after restart: %q", out)
	}
	if out := shOK(t, m2, sb.ID, "hostname"); out != sb.ID+"\n" {
		t.Fatalf("hostname %q, want the ID", out)
	}
	if err := m2.Delete(ctxT(t), old.ID); err != nil {
		t.Fatal(err)
	}
	if err := m2.DeleteAll(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	e.requireEmpty(t, m2, "after DeleteAll")
}

func TestBadNodeName(t *testing.T) {
	e := newEnv(t)
	drv, err := container.New(e.dcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	for _, bad := range []string{"Node_A", "a.b", "-x", "this-node-name-is-far-too-long-to-fit"} {
		cfg := agent.Config{DataDir: e.dataDir, Driver: drv, Images: e.store, Node: bad}
		if m, err := agent.New(ctxT(t), cfg); err == nil {
			m.Close()
			t.Errorf("node name %q accepted", bad)
		}
	}
}
