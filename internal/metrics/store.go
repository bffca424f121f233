package metrics

import (
	"context"
	"regexp"

	"github.com/dsec-dev/dsec/internal/trajectory"
)

// Store is a trajectory.Store that counts the steps it decides: live, replayed
// (answered from the log, nothing ran) or refused (a divergence or an error).
type Store struct {
	trajectory.Store
	m *Metrics
}

// WrapStore returns st counting into m.
func (m *Metrics) WrapStore(st trajectory.Store) *Store { return &Store{Store: st, m: m} }

var opName = regexp.MustCompile(`^[a-z_]{1,32}$`)

// Begin implements trajectory.Store.
func (s *Store) Begin(ctx context.Context, req trajectory.BeginRequest) (trajectory.Decision, error) {
	d, err := s.Store.Begin(ctx, req)
	op := req.Op
	if !opName.MatchString(op) {
		op = other
	}
	res := "live"
	switch {
	case err != nil:
		res = "refused"
	case d.Replay != nil:
		res = "replayed"
	}
	s.m.trajSteps.WithLabelValues(op, res).Inc()
	return d, err
}
