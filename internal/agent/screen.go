package agent

import (
	"context"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// displayInst returns sandbox id's running instance when its backend claims
// capable, else not_implemented (or not_found, sandbox_gone).
func (m *Manager) displayInst(id, op string, capable func(driver.Capabilities) bool) (driver.Instance, error) {
	sb, err := m.get(id)
	if err != nil {
		return nil, err
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	switch {
	case sb.deleted:
		return nil, errdefs.NotFound("sandbox %q not found", id)
	case !capable(sb.drv.Capabilities()):
		return nil, errdefs.New(api.CodeNotImplemented, "backend %q has no display: cannot %s", sb.rec.Backend, op)
	case driver.Exited(sb.inst):
		return nil, errdefs.New(api.CodeSandboxGone, "sandbox %s has exited", id)
	case sb.rec.Paused:
		return nil, errdefs.New(api.CodeConflict, "sandbox %s is paused: resume it first", id)
	}
	sb.lastActive.Store(m.now().UnixNano())
	return sb.inst, nil
}

// Screenshot implements session.Display (driver.Screenshotter).
func (m *Manager) Screenshot(ctx context.Context, id string) ([]byte, error) {
	inst, err := m.displayInst(id, "take a screenshot", func(c driver.Capabilities) bool { return c.Screenshot })
	if err != nil {
		return nil, err
	}
	s, ok := inst.(driver.Screenshotter)
	if !ok {
		return nil, errdefs.New(api.CodeNotImplemented, "sandbox %s cannot take a screenshot", id)
	}
	return s.Screenshot(ctx)
}

// SendInput implements session.Display (driver.Input).
func (m *Manager) SendInput(ctx context.Context, id string, req api.InputRequest) (api.InputResult, error) {
	inst, err := m.displayInst(id, "take input", func(c driver.Capabilities) bool { return c.Input })
	if err != nil {
		return api.InputResult{}, err
	}
	in, ok := inst.(driver.Input)
	if !ok {
		return api.InputResult{}, errdefs.New(api.CodeNotImplemented, "sandbox %s cannot take input", id)
	}
	return in.SendInput(ctx, req)
}
