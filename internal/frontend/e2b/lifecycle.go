package e2b

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// lifecycle keeps each E2B sandbox's deadline and kills or pauses the sandbox
// when it passes. E2B lets a client move the deadline at any time (setTimeout,
// connect, refresh), which the session contract's fixed TTL cannot express, so
// the deadlines live here, in memory; the timeout a sandbox was created with is
// in its labels, and Recover re-arms it after a restart.
type lifecycle struct {
	svc   session.Service
	log   *slog.Logger
	now   func() time.Time
	ended func(id string) // called after a sandbox was killed at its deadline

	mu     sync.Mutex
	m      map[string]*deadline
	closed bool
}

// deadline is one sandbox's: when, what happens then, and the timer (nil while
// the sandbox is paused).
type deadline struct {
	at     time.Time
	action string
	timer  *time.Timer
	gen    uint64 // which arming of the timer is current
}

func newLifecycle(svc session.Service, log *slog.Logger, now func() time.Time, ended func(string)) *lifecycle {
	return &lifecycle{svc: svc, log: log, now: now, ended: ended, m: map[string]*deadline{}}
}

// set makes at the deadline of sandbox id, replacing any earlier one.
func (l *lifecycle) set(id string, at time.Time, action string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.setLocked(id, at, action)
}

func (l *lifecycle) setLocked(id string, at time.Time, action string) {
	if l.closed {
		return
	}
	d := l.m[id]
	if d == nil {
		d = &deadline{}
		l.m[id] = d
	} else if d.timer != nil {
		d.timer.Stop()
	}
	d.at, d.action = at, action
	d.timer = l.armLocked(id, d)
}

func (l *lifecycle) armLocked(id string, d *deadline) *time.Timer {
	d.gen++
	gen := d.gen
	return time.AfterFunc(d.at.Sub(l.now()), func() { l.fire(id, gen) })
}

// extend moves the deadline of id to at if that is later (E2B's connect only
// ever extends), and re-arms it if the sandbox was paused.
func (l *lifecycle) extend(id string, at time.Time, action string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d := l.m[id]; d != nil && d.at.After(at) {
		at = d.at
	}
	l.setLocked(id, at, action)
}

// stop keeps the deadline of a paused sandbox but disarms it: a paused sandbox
// does not time out.
func (l *lifecycle) stop(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d := l.m[id]; d != nil && d.timer != nil {
		d.timer.Stop()
		d.timer = nil
		d.gen++
	}
}

// resumed re-arms a sandbox that was resumed: from now, for the timeout it was
// created with (E2B's default when unknown), unless its deadline is later.
func (l *lifecycle) resumed(sb api.Sandbox) {
	t := timeoutOf(sb)
	if t == 0 {
		if !e2bMade(sb) {
			return // not an E2B sandbox: no deadline
		}
		t = defaultTimeoutV2 * time.Second
	}
	l.extend(sb.ID, l.now().Add(t), onTimeoutOf(sb))
}

// drop forgets sandbox id.
func (l *lifecycle) drop(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d := l.m[id]; d != nil {
		if d.timer != nil {
			d.timer.Stop()
		}
		delete(l.m, id)
	}
}

// deadline returns the deadline of id.
func (l *lifecycle) deadline(id string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d := l.m[id]; d != nil {
		return d.at, true
	}
	return time.Time{}, false
}

func (l *lifecycle) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for _, d := range l.m {
		if d.timer != nil {
			d.timer.Stop()
		}
	}
	l.m = map[string]*deadline{}
}

// fire runs when arming gen of id's timer expires, unless it was re-armed or
// stopped meanwhile.
func (l *lifecycle) fire(id string, gen uint64) {
	l.mu.Lock()
	d := l.m[id]
	if d == nil || d.gen != gen || d.timer == nil || l.closed {
		l.mu.Unlock()
		return
	}
	action := d.action
	if action == actionPause {
		d.timer = nil
	} else {
		delete(l.m, id)
	}
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if action == actionPause {
		_, err := l.svc.Pause(ctx, id)
		if err == nil || errdefs.Is(err, api.CodeConflict) {
			return
		}
		l.log.Warn("e2b: pausing a sandbox at its timeout failed; killing it", "sandbox", id, "err", err)
		l.drop(id)
	}
	if err := l.svc.Delete(ctx, id); err != nil && !errdefs.Is(err, api.CodeNotFound) {
		l.log.Error("e2b: killing a sandbox at its timeout failed", "sandbox", id, "err", err)
		return
	}
	l.ended(id)
}

// Recover re-arms the deadlines of the running E2B sandboxes svc holds (after a
// restart of the front end): each gets the timeout it was created with, from
// now. Paused ones keep no timer.
func (h *Handler) Recover(ctx context.Context) error {
	all, err := h.svc.List(session.WithoutStep(ctx))
	if err != nil {
		return err
	}
	for _, sb := range all {
		t := timeoutOf(sb)
		if t == 0 || !visible(sb) {
			continue
		}
		h.life.set(sb.ID, h.now().Add(t), onTimeoutOf(sb))
		if sb.State == api.StatePaused {
			h.life.stop(sb.ID)
		}
	}
	return nil
}
