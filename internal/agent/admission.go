package agent

import (
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
)

// AdmissionRetryAfter is the Retry-After a create refused because the node is
// at its sandbox limit carries: room appears only when a sandbox is deleted, so
// the caller should back off rather than hammer the node.
const AdmissionRetryAfter = time.Second

// admission is one create's reserved place under the node's sandbox limit.
// Admission is decided before any expensive work (a create slot, layers, the
// driver), and the count it checks includes creates still in flight, so a
// burst can neither wait behind the creates it would exceed the limit with nor
// over-admit.
type admission struct {
	m    *Manager
	done bool // the place became a sandbox in m.sandboxes or was released
}

// admit reserves room for n sandboxes or refuses with resource_exhausted and a
// Retry-After. Each reservation is released by release or, for one that became
// a sandbox, by takenLocked.
func (m *Manager) admit(n int) ([]*admission, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.sandboxes)+m.admitting+n > m.cfg.MaxSandboxes {
		return nil, errdefs.Exhausted(AdmissionRetryAfter, "node is at its limit of %d sandboxes", m.cfg.MaxSandboxes)
	}
	m.admitting += n
	out := make([]*admission, n)
	for i := range out {
		out[i] = &admission{m: m}
	}
	return out, nil
}

// takenLocked hands the place over to the sandbox just added to m.sandboxes, in
// the same critical section (m.mu held), so it is never counted twice.
func (a *admission) takenLocked() {
	if a == nil || a.done {
		return
	}
	a.done = true
	a.m.admitting--
}

// release gives the place back unless a sandbox took it.
func (a *admission) release() {
	if a == nil {
		return
	}
	a.m.mu.Lock()
	defer a.m.mu.Unlock()
	a.takenLocked()
}
