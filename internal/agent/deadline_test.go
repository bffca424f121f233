package agent_test

import (
	"testing"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// A sandbox's deadline is the node's: SetDeadline moves it (later or earlier,
// or only later with ExtendOnly), a restart of the agent keeps it, and at it
// the sandbox is deleted or paused as asked.
func TestDeadlineKeptByNode(t *testing.T) {
	e := newEnv(t)
	m1 := e.open(t, nil)
	del := create(t, m1, api.CreateSandboxRequest{TTLSeconds: 30})
	pause := create(t, m1, api.CreateSandboxRequest{})
	if pause.ExpiresAt != nil {
		t.Fatalf("a sandbox without a TTL has a deadline: %v", pause.ExpiresAt)
	}
	near := func(sb api.Sandbox, want time.Time, what string) {
		t.Helper()
		if sb.ExpiresAt == nil || sb.ExpiresAt.Sub(want).Abs() > 3*time.Second {
			t.Fatalf("%s: expires_at %v, want about %v", what, sb.ExpiresAt, want)
		}
	}
	// Moved later, then not shortened by an extend-only call, then shortened.
	sb, err := m1.SetDeadline(ctxT(t), del.ID, api.DeadlineRequest{TimeoutSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	near(sb, e.clock.Now().Add(600*time.Second), "moved later")
	sb, err = m1.SetDeadline(ctxT(t), del.ID, api.DeadlineRequest{TimeoutSeconds: 10, ExtendOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	near(sb, e.clock.Now().Add(600*time.Second), "extend-only with an earlier time")
	sb, err = m1.SetDeadline(ctxT(t), del.ID, api.DeadlineRequest{TimeoutSeconds: 120})
	if err != nil {
		t.Fatal(err)
	}
	delAt := e.clock.Now().Add(120 * time.Second)
	near(sb, delAt, "shortened")
	if sb.OnExpiry != api.ExpiryDelete {
		t.Errorf("on_expiry %q, want delete", sb.OnExpiry)
	}
	sb, err = m1.SetDeadline(ctxT(t), pause.ID, api.DeadlineRequest{TimeoutSeconds: 60, OnExpiry: api.ExpiryPause})
	if err != nil {
		t.Fatal(err)
	}
	pauseAt := e.clock.Now().Add(60 * time.Second)
	near(sb, pauseAt, "pause deadline")
	for what, req := range map[string]api.DeadlineRequest{
		"negative": {TimeoutSeconds: -1},
		"absurd":   {TimeoutSeconds: api.MaxTimeoutSeconds + 1},
		"action":   {TimeoutSeconds: 5, OnExpiry: "explode"},
	} {
		_, err := m1.SetDeadline(ctxT(t), del.ID, req)
		wantCode(t, what, err, api.CodeInvalidArgument)
	}
	_, err = m1.SetDeadline(ctxT(t), "sb-nope", api.DeadlineRequest{TimeoutSeconds: 5})
	wantCode(t, "unknown sandbox", err, api.CodeNotFound)
	if err := m1.Close(); err != nil { // the agent stops; its sandboxes keep running
		t.Fatal(err)
	}

	m2 := e.open(t, nil)
	sb, err = m2.Get(ctxT(t), del.ID)
	if err != nil {
		t.Fatal(err)
	}
	near(sb, delAt, "after a restart")
	sb, err = m2.Get(ctxT(t), pause.ID)
	if err != nil {
		t.Fatal(err)
	}
	near(sb, pauseAt, "pause deadline after a restart")
	if sb.OnExpiry != api.ExpiryPause {
		t.Errorf("on_expiry after a restart %q, want pause", sb.OnExpiry)
	}

	e.clock.Advance(61 * time.Second)
	waitFor(t, 5*time.Second, "the sandbox to pause at its deadline", func() bool {
		sb, err := m2.Get(ctxT(t), pause.ID)
		return err == nil && sb.State == api.StatePaused && sb.ExpiresAt == nil
	})
	if _, err := m2.Get(ctxT(t), del.ID); err != nil {
		t.Fatalf("deleted before its deadline: %v", err)
	}
	e.clock.Advance(60 * time.Second)
	waitFor(t, 5*time.Second, "the sandbox to be deleted at its deadline", func() bool {
		_, err := m2.Get(ctxT(t), del.ID)
		return err != nil
	})
	if _, err := m2.Get(ctxT(t), pause.ID); err != nil {
		t.Fatalf("a paused sandbox went at the next deadline: %v", err)
	}
}
