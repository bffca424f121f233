package agent_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// gatedPuller plays a node's image puller for the mock driver: a pull of a
// reference waits until the test lets it go, then gives the tiny directory
// image pinned to a digest of its own, or fails with the test's error. Pulls
// of one reference share the wait, as the real puller's do.
type gatedPuller struct {
	tiny *image.Store

	mu       sync.Mutex
	gates    map[string]chan struct{} // ref → closed when its pull may end
	fail     map[string]error
	have     map[string]bool
	inFlight map[string]int
}

func newGatedPuller(t *testing.T) *gatedPuller {
	return &gatedPuller{tiny: newMockEnv(t).store, gates: map[string]chan struct{}{}, fail: map[string]error{},
		have: map[string]bool{}, inFlight: map[string]int{}}
}

func (g *gatedPuller) gate(ref string) chan struct{} {
	if g.gates[ref] == nil {
		g.gates[ref] = make(chan struct{})
	}
	return g.gates[ref]
}

// finish lets the pulls of ref end, with err (nil: the image).
func (g *gatedPuller) finish(ref string, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fail[ref] = err
	close(g.gate(ref))
}

func (g *gatedPuller) waiting(ref string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inFlight[ref]
}

func (g *gatedPuller) PullRef(ctx context.Context, ref string) (image.Image, error) {
	g.mu.Lock()
	gate := g.gate(ref)
	g.inFlight[ref]++
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.inFlight[ref]--
		g.mu.Unlock()
	}()
	select {
	case <-gate:
	case <-ctx.Done():
		return image.Image{}, fmt.Errorf("waiting for %s: %w", ref, ctx.Err())
	}
	g.mu.Lock()
	err := g.fail[ref]
	if err == nil {
		g.have[ref] = true
	}
	g.mu.Unlock()
	if err != nil {
		return image.Image{}, err
	}
	img, err := g.tiny.Resolve("tiny")
	img.Ref, img.Digest = ref, "sha256:"+fmt.Sprintf("%064x", len(ref))
	return img, err
}

func (g *gatedPuller) PulledRefs() ([]image.Image, error) { return nil, nil }

func (g *gatedPuller) Has(ref string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.have[ref]
}

func (g *gatedPuller) Progress(ref string) (api.PullProgress, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inFlight[ref] == 0 {
		return api.PullProgress{}, false
	}
	return api.PullProgress{Ref: ref, Phase: api.PullFetching, FetchedBytes: 10, TotalBytes: 100}, true
}

func (g *gatedPuller) Pulls() []api.PullProgress { return nil }

func pullingNode(t *testing.T) (*agent.Manager, *gatedPuller) {
	g := newGatedPuller(t)
	m := agenttest.New(t, agenttest.Options{Config: func(c *agent.Config) { c.Images.Refs = g }})
	return m, g
}

func noWait() *bool { f := false; return &f }

func state(t *testing.T, m *agent.Manager, id string) api.Sandbox {
	t.Helper()
	sb, err := m.Get(ctxT(t), id)
	if err != nil {
		t.Fatalf("Get %s: %v", id, err)
	}
	return sb
}

// A create with wait false of an image the node lacks answers at once in
// state pulling with the pull's progress (GET and list show it; other
// operations are conflict); once the pull ends the same ID runs.
func TestMockCreateWithoutWaitPulls(t *testing.T) {
	m, g := pullingNode(t)
	const ref = "registry.test/tasks/app:1"
	sb, err := m.Create(ctxT(t), api.CreateSandboxRequest{Image: ref, Wait: noWait(), Labels: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != api.StatePulling || sb.ID == "" || sb.Image != ref || sb.Labels["k"] != "v" {
		t.Fatalf("create answered %+v, want state pulling", sb)
	}
	testwait.For(t, 10*time.Second, "the pull to start", func() bool { return g.waiting(ref) == 1 })
	got := state(t, m, sb.ID)
	if got.State != api.StatePulling || got.Pull == nil || got.Pull.TotalBytes != 100 || got.Pull.FetchedBytes != 10 {
		t.Fatalf("GET while pulling %+v (pull %+v), want the pull's progress", got, got.Pull)
	}
	list, err := m.List(ctxT(t))
	if err != nil || len(list) != 1 || list[0].ID != sb.ID || list[0].State != api.StatePulling {
		t.Fatalf("list while pulling %+v %v", list, err)
	}
	if _, err := m.Exec(ctxT(t), sb.ID, api.ExecRequest{Cmd: []string{"true"}}); !errdefs.Is(err, api.CodeConflict) {
		t.Fatalf("exec while pulling: %v, want conflict", err)
	}
	g.finish(ref, nil)
	testwait.For(t, 10*time.Second, "the sandbox to run", func() bool {
		got, err := m.Get(ctxT(t), sb.ID)
		return err == nil && got.State == api.StateRunning
	})
	got = state(t, m, sb.ID)
	if got.ImageRef != ref || got.ImageDigest == "" || got.Pull != nil {
		t.Fatalf("running sandbox %+v, want its reference and digest", got)
	}
	if res := execOK(t, m, sb.ID, api.ExecRequest{Shell: "echo hi"}); res.Stdout != "hi\n" {
		t.Fatalf("exec in the sandbox: %+v", res)
	}
	// Now the node has the image: wait false answers once it runs.
	again, err := m.Create(ctxT(t), api.CreateSandboxRequest{Image: ref, Wait: noWait()})
	if err != nil || again.State != api.StateRunning {
		t.Fatalf("create of an image the node has: %+v %v, want running", again, err)
	}
	if list, _ := m.List(ctxT(t)); len(list) != 2 {
		t.Fatalf("sandboxes %d, want 2", len(list))
	}
}

// A pull that fails leaves the sandbox in state failed with the pull's
// error code until it is deleted; a retry with the same request ID answers
// with the same sandbox.
func TestMockCreateWithoutWaitFails(t *testing.T) {
	m, g := pullingNode(t)
	const ref = "registry.test/tasks/missing:1"
	req := api.CreateSandboxRequest{Image: ref, Wait: noWait(), RequestID: "r1"}
	sb, err := m.Create(ctxT(t), req)
	if err != nil || sb.State != api.StatePulling {
		t.Fatalf("create %+v %v, want pulling", sb, err)
	}
	g.finish(ref, errdefs.NotFound("manifest unknown: %s", ref))
	testwait.For(t, 10*time.Second, "the create to fail", func() bool { return state(t, m, sb.ID).State == api.StateFailed })
	got := state(t, m, sb.ID)
	if got.Error == nil || got.Error.Code != api.CodeNotFound || got.Error.Infrastructure {
		t.Fatalf("failed sandbox %+v (error %+v), want not_found, not infrastructure", got, got.Error)
	}
	retry, err := m.Create(ctxT(t), req)
	if err != nil || retry.ID != sb.ID || retry.State != api.StateFailed {
		t.Fatalf("retry with the request ID: %+v %v, want %s failed", retry, err, sb.ID)
	}
	if _, err := m.Exec(ctxT(t), sb.ID, api.ExecRequest{Cmd: []string{"true"}}); !errdefs.Is(err, api.CodeConflict) {
		t.Fatalf("exec on a failed sandbox: %v, want conflict", err)
	}
	if err := m.Delete(ctxT(t), sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get(ctxT(t), sb.ID); !errdefs.Is(err, api.CodeNotFound) {
		t.Fatalf("GET after delete: %v, want not_found", err)
	}
	if list, _ := m.List(ctxT(t)); len(list) != 0 {
		t.Fatalf("sandboxes left %+v", list)
	}
}

// Deleting a sandbox while it pulls stops its create at once; another
// create waiting on the same pull goes on and runs; nothing of the deleted
// one is left.
func TestMockDeleteWhilePulling(t *testing.T) {
	m, g := pullingNode(t)
	const ref = "registry.test/tasks/shared:1"
	a, err := m.Create(ctxT(t), api.CreateSandboxRequest{Image: ref, Wait: noWait()})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Create(ctxT(t), api.CreateSandboxRequest{Image: ref, Wait: noWait()})
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "both creates to wait on the pull", func() bool { return g.waiting(ref) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.Delete(ctx, a.ID); err != nil {
		t.Fatalf("delete while pulling: %v", err)
	}
	if _, err := m.Get(ctxT(t), a.ID); !errdefs.Is(err, api.CodeNotFound) {
		t.Fatalf("GET after delete: %v, want not_found", err)
	}
	if n := g.waiting(ref); n != 1 {
		t.Fatalf("creates waiting on the pull after the delete: %d, want 1", n)
	}
	g.finish(ref, nil)
	testwait.For(t, 10*time.Second, "the other sandbox to run", func() bool { return state(t, m, b.ID).State == api.StateRunning })
	list, err := m.List(ctxT(t))
	if err != nil || len(list) != 1 || list[0].ID != b.ID {
		t.Fatalf("sandboxes %+v %v, want only %s", list, err, b.ID)
	}
	if err := m.Delete(ctxT(t), a.ID); !errdefs.Is(err, api.CodeNotFound) {
		t.Fatalf("second delete: %v, want not_found", err)
	}
}

// An agent that restarts takes up the creates it had answered in state
// pulling, under the same IDs (the fetch starts again), and keeps the ones
// that had failed.
func TestMockPullingSurvivesRestart(t *testing.T) {
	e := newMockEnv(t)
	g := newGatedPuller(t)
	e.store.Refs = g
	m := e.open(t)
	const ref, missing = "registry.test/tasks/restart:1", "registry.test/tasks/missing:1"
	sb, err := m.Create(ctxT(t), api.CreateSandboxRequest{Image: ref, Wait: noWait(), RequestID: "keep"})
	if err != nil || sb.State != api.StatePulling {
		t.Fatalf("create %+v %v, want pulling", sb, err)
	}
	bad, err := m.Create(ctxT(t), api.CreateSandboxRequest{Image: missing, Wait: noWait()})
	if err != nil {
		t.Fatal(err)
	}
	g.finish(missing, errdefs.NotFound("manifest unknown: %s", missing))
	testwait.For(t, 10*time.Second, "the missing image's create to fail", func() bool { return state(t, m, bad.ID).State == api.StateFailed })
	m.Close()

	m2 := e.open(t)
	if got := state(t, m2, sb.ID); got.State != api.StatePulling || got.Image != ref {
		t.Fatalf("after the restart %+v, want the create still pulling %s", got, ref)
	}
	if got := state(t, m2, bad.ID); got.State != api.StateFailed || got.Error == nil || got.Error.Code != api.CodeNotFound {
		t.Fatalf("failed create after the restart %+v (error %+v), want failed, not_found", got, got.Error)
	}
	if again, err := m2.Create(ctxT(t), api.CreateSandboxRequest{Image: ref, Wait: noWait(), RequestID: "keep"}); err != nil || again.ID != sb.ID {
		t.Fatalf("retry with the request ID after the restart: %+v %v, want %s", again, err, sb.ID)
	}
	testwait.For(t, 10*time.Second, "the restarted agent's pull", func() bool { return g.waiting(ref) == 1 })
	g.finish(ref, nil)
	testwait.For(t, 10*time.Second, "the sandbox to run", func() bool { return state(t, m2, sb.ID).State == api.StateRunning })
	if res := execOK(t, m2, sb.ID, api.ExecRequest{Shell: "echo up"}); res.Stdout != "up\n" {
		t.Fatalf("exec: %+v", res)
	}
	if err := m2.Delete(ctxT(t), bad.ID); err != nil {
		t.Fatal(err)
	}
	m2.Close()
	m3 := e.open(t)
	list, err := m3.List(ctxT(t))
	if err != nil || len(list) != 1 || list[0].ID != sb.ID || list[0].State != api.StateRunning {
		t.Fatalf("after a second restart %+v %v, want only %s running", list, err, sb.ID)
	}
}
