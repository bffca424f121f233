package agent

import (
	"context"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// deadline is the record's deadline: the one SetDeadline set, else CreatedAt +
// TTLSeconds; ok is false when it has none.
func (r *record) deadline() (time.Time, bool) {
	switch {
	case r.Deadline != nil:
		return *r.Deadline, true
	case r.TTLSeconds > 0:
		return r.CreatedAt.Add(time.Duration(r.TTLSeconds) * time.Second), true
	}
	return time.Time{}, false
}

// onExpiry is what happens at the record's deadline.
func (r *record) onExpiry() string {
	if r.OnExpiry == api.ExpiryPause || r.OnExpiry == api.ExpiryPauseFilesystem {
		return r.OnExpiry
	}
	return api.ExpiryDelete
}

// setDeadline replaces the record's deadline (nil: none).
func (r *record) setDeadline(at *time.Time) {
	r.Deadline, r.TTLSeconds = at, 0
}

// SetDeadline implements session.Service: it moves the sandbox's deadline,
// which the record keeps (a restart of the agent keeps it) and expiryLoop
// enforces.
func (m *Manager) SetDeadline(ctx context.Context, id string, req api.DeadlineRequest) (api.Sandbox, error) {
	if err := session.ValidateDeadline(req); err != nil {
		return api.Sandbox{}, err
	}
	sb, err := m.get(id)
	if err != nil {
		return api.Sandbox{}, err
	}
	if err := canPauseAtDeadline(sb.drv, req.OnExpiry); err != nil {
		return api.Sandbox{}, err
	}
	sb.mu.Lock()
	if sb.deleted {
		sb.mu.Unlock()
		return api.Sandbox{}, errdefs.NotFound("sandbox %q not found", id)
	}
	r := sb.rec
	if req.OnExpiry != "" {
		r.OnExpiry = req.OnExpiry
	}
	var at *time.Time
	if req.TimeoutSeconds > 0 {
		t := m.now().UTC().Add(time.Duration(req.TimeoutSeconds) * time.Second)
		at = &t
	}
	cur, has := r.deadline()
	switch {
	case !req.ExtendOnly:
		r.setDeadline(at)
	case at != nil && (!has || at.After(cur)):
		r.setDeadline(at)
	}
	err = sb.save()
	sb.mu.Unlock()
	if err != nil {
		return api.Sandbox{}, err
	}
	return sb.view(), nil
}

// expire applies what is due to sandbox id: deletes it, or pauses it (its
// deadline then goes: a paused sandbox has none). A sandbox that cannot pause
// is deleted.
func (m *Manager) expire(ctx context.Context, id, action string) {
	if action == api.ExpiryPause || action == api.ExpiryPauseFilesystem {
		err := m.pauseAtDeadline(ctx, id, action == api.ExpiryPause)
		if err == nil {
			m.log.Info("paused sandbox at its deadline", "id", id)
			return
		}
		if errdefs.Is(err, api.CodeNotFound) {
			return
		}
		m.log.Warn("pausing a sandbox at its deadline failed; deleting it", "id", id, "err", err)
	}
	if err := m.Delete(ctx, id); err != nil && !errdefs.Is(err, api.CodeNotFound) {
		m.log.Warn("expire sandbox", "id", id, "err", err)
	} else {
		m.log.Info("expired sandbox", "id", id)
	}
}

// canPauseAtDeadline refuses a deadline that pauses without memory on a
// backend that cannot (see pauseFilesystem).
func canPauseAtDeadline(drv driver.Driver, onExpiry string) error {
	if onExpiry == api.ExpiryPauseFilesystem && !drv.Capabilities().Fork {
		return errdefs.New(api.CodeNotImplemented, "backend %q cannot pause without memory (on_expiry %q)", drv.Name(), onExpiry)
	}
	return nil
}

func (m *Manager) pauseAtDeadline(ctx context.Context, id string, memory bool) error {
	sb, err := m.get(id)
	if err != nil {
		return err
	}
	sb.mu.Lock()
	paused := sb.rec.Paused
	sb.mu.Unlock()
	if !paused {
		pause := m.Pause
		if !memory {
			pause = m.pauseFilesystem
		}
		if _, err := pause(ctx, id); err != nil && !errdefs.Is(err, api.CodeConflict) {
			return err
		}
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.deleted {
		return errdefs.NotFound("sandbox %q not found", id)
	}
	sb.rec.setDeadline(nil)
	return sb.save()
}
