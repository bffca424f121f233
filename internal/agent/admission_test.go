package agent_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// gatedDriver holds every Start until gate is closed.
type gatedDriver struct {
	driver.Driver
	gate chan struct{}
}

func (d gatedDriver) Start(ctx context.Context, spec driver.Spec) (driver.Instance, error) {
	select {
	case <-d.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return d.Driver.Start(ctx, spec)
}

// TestMockAdmissionBurst: a burst of creates far over the node's limit while
// the admitted ones are still starting. The ones over the limit are refused at
// once (not after waiting for a create slot behind the admitted ones) with
// resource_exhausted and a retry delay, and exactly the limit is created.
func TestMockAdmissionBurst(t *testing.T) {
	const limit, burst = 10, 60
	e := newMockEnv(t)
	gate := make(chan struct{})
	reg, err := driver.NewRegistry(gatedDriver{e.driver(t, "", false), gate})
	if err != nil {
		t.Fatal(err)
	}
	m, err := agent.New(ctxT(t), agent.Config{DataDir: e.dataDir, Drivers: reg, Images: e.store, Node: "test",
		MaxSandboxes: limit, MaxCreating: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.DeleteAll(context.Background()); err != nil {
			t.Errorf("DeleteAll: %v", err)
		}
		m.Close()
	})

	type answer struct {
		err error
		at  time.Duration
	}
	answers := make(chan answer, burst)
	t0 := time.Now()
	var wg sync.WaitGroup
	for range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := m.Create(ctxT(t), api.CreateSandboxRequest{})
			answers <- answer{err, time.Since(t0)}
		}()
	}
	// With every admitted create stuck in Start, the rest must be answered.
	refused := 0
	deadline := time.After(10 * time.Second)
	for refused < burst-limit {
		select {
		case a := <-answers:
			if a.err == nil {
				t.Fatalf("a create succeeded while every Start was held")
			}
			if !errdefs.Is(a.err, api.CodeResourceExhausted) {
				t.Fatalf("refused create: %v, want resource_exhausted", a.err)
			}
			if d, ok := errdefs.RetryAfter(a.err); !ok || d <= 0 {
				t.Errorf("refused create carries no retry delay: %v", a.err)
			}
			refused++
		case <-deadline:
			t.Fatalf("only %d of %d creates over the limit were refused while the admitted ones were starting (admission waits behind the create slots)", refused, burst-limit)
		}
	}
	close(gate)
	wg.Wait()
	close(answers)
	ok := 0
	for a := range answers {
		if a.err != nil {
			t.Errorf("admitted create failed: %v", a.err)
			continue
		}
		ok++
	}
	if ok != limit || m.Count() != limit {
		t.Errorf("%d creates succeeded, %d sandboxes; want exactly %d", ok, m.Count(), limit)
	}
	// A place frees on delete, and only then.
	if _, err := m.Create(ctxT(t), api.CreateSandboxRequest{}); !errdefs.Is(err, api.CodeResourceExhausted) {
		t.Fatalf("create at the limit: %v", err)
	}
	sbs, err := m.List(ctxT(t))
	if err != nil || len(sbs) == 0 {
		t.Fatal(sbs, err)
	}
	if err := m.Delete(ctxT(t), sbs[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctxT(t), api.CreateSandboxRequest{}); err != nil {
		t.Fatalf("create after a delete: %v", err)
	}
}
