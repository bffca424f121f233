package metrics

import "regexp"

var opName = regexp.MustCompile(`^[a-z_]{1,32}$`)

// TrajectoryStep counts a trajectory step the log decided: live (it ran),
// replayed (answered from the log, nothing ran) or refused (err: a divergence
// or an error). It has trajectory.Options.OnStep's signature: the role's
// assembly passes it there.
func (m *Metrics) TrajectoryStep(op string, replayed bool, err error) {
	if !opName.MatchString(op) {
		op = other
	}
	res := "live"
	switch {
	case err != nil:
		res = "refused"
	case replayed:
		res = "replayed"
	}
	m.trajSteps.WithLabelValues(op, res).Inc()
}
