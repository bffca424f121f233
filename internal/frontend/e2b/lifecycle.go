package e2b

import (
	"context"
	"time"

	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// A sandbox's E2B deadline is its deadline in the session contract
// (session.Resources.SetDeadline): the sandbox's node keeps and enforces it,
// so the front end holds no timer, a setTimeout through any API server
// replaces the one set through another, and the deadline outlives the API
// server that set it. E2B's kill on timeout is api.ExpiryDelete, its
// autoPause api.ExpiryPause (api.ExpiryPauseFilesystem with autoPauseMemory
// false). A paused sandbox has no deadline (E2B's paused
// sandboxes do not time out); resuming gives it one again.

// expiryOf maps E2B's action at the deadline to the contract's.
func expiryOf(action string) string {
	switch action {
	case actionPause:
		return api.ExpiryPause
	case actionPauseFS:
		return api.ExpiryPauseFilesystem
	}
	return api.ExpiryDelete
}

// setDeadline puts sandbox id's deadline secs from now (at least a second:
// E2B's zero timeout ends the sandbox at once), replacing the one it has, or
// with extend only moving it later.
func (h *Handler) setDeadline(ctx context.Context, sb api.Sandbox, secs int64, extend bool) error {
	_, err := h.svc.SetDeadline(session.WithoutStep(ctx), sb.ID, api.DeadlineRequest{
		TimeoutSeconds: max(secs, 1), OnExpiry: expiryOf(sb.Labels[labelOnTimeout]), ExtendOnly: extend})
	return err
}

// clearDeadline removes sandbox id's deadline (it was paused).
func (h *Handler) clearDeadline(ctx context.Context, id string) error {
	_, err := h.svc.SetDeadline(session.WithoutStep(ctx), id, api.DeadlineRequest{})
	return err
}

// resumedTimeout is how long a resumed sandbox runs at least: the timeout it
// was created with (E2B's default when unknown), 0 for a sandbox made through
// /v1 without one.
func resumedTimeout(sb api.Sandbox) int64 {
	t := timeoutOf(sb)
	if t == 0 {
		if !e2bMade(sb) {
			return 0
		}
		return defaultTimeoutV2
	}
	return int64(t / time.Second)
}
