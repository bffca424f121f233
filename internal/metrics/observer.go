package metrics

import (
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
)

// Create phases besides the agent's (admission, image_mount, start):
// PhasePlacement is the cluster placement engine's, reserved for the API tier.
const PhasePlacement = "placement"

var phases = []string{PhasePlacement, "admission", "image_mount", "start", "warm"}

// Phase implements agent.Observer: create phases into their histogram (other
// phases, an exec's driver call, are traced only); a failed admission counts as
// a rejection.
func (m *Metrics) Phase(backend, phase string, d time.Duration, err error) {
	if phase == "admission" && err != nil {
		m.rejections.WithLabelValues(m.backend(backend), codeLabel(errdefs.CodeOf(err))).Inc()
	}
	if bounded(phase, phases) == other {
		return
	}
	m.phaseSeconds.WithLabelValues(m.backend(backend), phase).Observe(d.Seconds())
}

// Reclaimed implements agent.Observer.
func (m *Metrics) Reclaimed(how string, bytes int64) {
	m.reclaimed.WithLabelValues(bounded(how, []string{"pause", "idle"})).Add(float64(bytes))
}
