package agent_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// roots lists the sandboxes started on the mock host (each has a root
// directory named by its ID), recorded or not.
func (e *mockEnv) roots(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(e.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, x := range ents {
		ids = append(ids, x.Name())
	}
	return ids
}

// waiting lists the sandboxes of the warm pool: started, not listed.
func (e *mockEnv) waiting(t *testing.T, m *agent.Manager) []string {
	t.Helper()
	var ids []string
	for _, id := range e.roots(t) {
		if _, err := m.Get(ctxT(t), id); err != nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// waitReleased waits until none of ids has a root on the mock host.
func (e *mockEnv) waitReleased(t *testing.T, what string, ids []string) {
	t.Helper()
	testwait.For(t, 10*time.Second, what+" released", func() bool {
		return !slices.ContainsFunc(e.roots(t), func(id string) bool { return slices.Contains(ids, id) })
	})
}

// TestMockWarmPool: a node with a warm pool of 2 starts two sandboxes before
// any create and lists neither. A create that asks for the default sandbox
// (labels, TTL and image named are the request's own, the sandbox is the
// same) gets one of them, which works and carries the request's labels; the
// pool fills again. Creates of other shapes, each different from the one
// before, start their own and leave the pool as it was; two creates in a row
// of one shape turn the pool over to that shape, and the third takes from it.
// A waiting sandbox whose init died is not handed out. Closing the node
// destroys the pool (the env's cleanup fails on any root left behind).
func TestMockWarmPool(t *testing.T) {
	e := newMockEnv(t)
	e.warm = 2
	m := e.open(t)
	testwait.For(t, 10*time.Second, "the warm pool holds 2 sandboxes", func() bool { return poolWaiting(m) == 2 })
	pool := e.roots(t)
	if len(pool) != 2 {
		t.Fatalf("host has %v, want the pool's 2 sandboxes", pool)
	}
	if l, _ := m.List(ctxT(t)); len(l) != 0 {
		t.Errorf("the pool's sandboxes are listed: %+v", l)
	}

	sb := create(t, m, api.CreateSandboxRequest{Image: "tiny", Labels: map[string]string{"task": "t1"}, TTLSeconds: 60})
	if !slices.Contains(pool, sb.ID) {
		t.Errorf("default create made %s, not one of the pool's %v", sb.ID, pool)
	}
	if sb.Labels["task"] != "t1" || sb.ExpiresAt == nil || sb.ExpiresAt.Sub(sb.CreatedAt) != time.Minute {
		t.Errorf("the taken sandbox lost the request's labels or TTL: %+v", sb)
	}
	if out := shOK(t, m, sb.ID, "echo hello"); out != "hello\n" {
		t.Errorf("exec in the taken sandbox: %q", out)
	}
	if l, _ := m.List(ctxT(t)); len(l) != 1 || l[0].ID != sb.ID {
		t.Errorf("list after the take: %+v, want only %s", l, sb.ID)
	}
	testwait.For(t, 10*time.Second, "the pool fills again", func() bool { return poolWaiting(m) == 2 })

	defaults := e.waiting(t, m)
	for _, req := range []api.CreateSandboxRequest{
		{MemoryBytes: 64 << 20},
		{Env: map[string]string{"A": "b"}},
		{MemoryBytes: 64 << 20},
	} {
		other := create(t, m, req)
		if slices.Contains(defaults, other.ID) {
			t.Errorf("create %+v took waiting sandbox %s; it asked for another", req, other.ID)
		}
	}
	if got := e.waiting(t, m); !slices.Equal(got, defaults) {
		t.Errorf("creates of changing shapes turned the pool over: %v, was %v", got, defaults)
	}

	steady := api.CreateSandboxRequest{MemoryBytes: 96 << 20, Env: map[string]string{"TASK": "x"}}
	create(t, m, steady)
	create(t, m, steady)
	testwait.For(t, 10*time.Second, "the pool turned over to the steady shape", func() bool {
		w := e.waiting(t, m)
		return len(w) == 2 && !slices.Contains(w, defaults[0]) && !slices.Contains(w, defaults[1])
	})
	turned := e.waiting(t, m)
	third := create(t, m, steady)
	if !slices.Contains(turned, third.ID) {
		t.Errorf("third create of the steady shape made %s, not one of the waiting %v", third.ID, turned)
	}
	if out := shOK(t, m, third.ID, "echo $TASK"); out != "x\n" {
		t.Errorf("the taken sandbox's environment: %q", out)
	}

	// The waiting sandboxes die: the next create starts its own.
	testwait.For(t, 10*time.Second, "the pool fills again", func() bool { return poolWaiting(m) == 2 })
	dead := e.waiting(t, m)
	for _, id := range dead {
		if err := e.host.ExitInit(ctxT(t), id); err != nil {
			t.Fatal(err)
		}
	}
	fresh := create(t, m, steady)
	if slices.Contains(dead, fresh.ID) {
		t.Errorf("create got %s, whose init had died in the pool", fresh.ID)
	}
	if out := shOK(t, m, fresh.ID, "echo ok"); out != "ok\n" {
		t.Errorf("exec: %q", out)
	}
	e.waitReleased(t, "the dead sandboxes", dead)
}

// TestMockWarmPoolImageReplaced: when the default image's directory is
// replaced (rebuilt) while sandboxes wait on the old one, a create gets a
// sandbox of the new one, and the waiting ones are released.
func TestMockWarmPoolImageReplaced(t *testing.T) {
	e := newMockEnv(t)
	e.warm = 2
	m := e.open(t)
	testwait.For(t, 10*time.Second, "the warm pool holds 2 sandboxes", func() bool { return poolWaiting(m) == 2 })
	old := e.waiting(t, m)
	rootfs := filepath.Join(e.store.Dir, "tiny", "rootfs")
	if err := os.Rename(rootfs, rootfs+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "etc", "release"), []byte("new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb := create(t, m, api.CreateSandboxRequest{})
	if slices.Contains(old, sb.ID) {
		t.Errorf("create took %s, started on the replaced image", sb.ID)
	}
	if out := shOK(t, m, sb.ID, "cat ../etc/release"); out != "new\n" {
		t.Errorf("the new sandbox's image: %q", out)
	}
	e.waitReleased(t, "the sandboxes of the old image", old)
}

// TestWarmPoolSizeRefused: a negative pool size is a mistake, not "none".
func TestWarmPoolSizeRefused(t *testing.T) {
	e := newMockEnv(t)
	_, err := agent.New(ctxT(t), agent.Config{DataDir: e.dataDir, Driver: e.driver(t, "", false), Images: e.store, Node: "test", WarmPool: -1})
	if err == nil {
		t.Fatal("agent.New with WarmPool -1: no error")
	}
}

// poolWaiting is how many started sandboxes wait in m's warm pool.
func poolWaiting(m *agent.Manager) int {
	w, _ := m.WarmPool()
	return w
}
