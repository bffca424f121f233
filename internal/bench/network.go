package bench

import (
	"context"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// EgressPass is one pass of `dsec bench create --network`.
type EgressPass struct {
	Network     bool    `json:"network"`
	CreatesPerS float64 `json:"creates_per_s"`
	P50ms       float64 `json:"p50_ms"`
	P99ms       float64 `json:"p99_ms"`
	TeardownS   float64 `json:"teardown_s"`
	Failures    int     `json:"failures"`
	FirstError  string  `json:"first_error,omitempty"`
}

// EgressResult compares creates with and without egress on one node, in one
// run, interleaved as default, egress, default, egress; each pass creates N
// sandboxes with P workers, then deletes them.
type EgressResult struct {
	N      int               `json:"n"`
	Policy api.NetworkPolicy `json:"policy"`
	Passes []EgressPass      `json:"passes"`
	// DefaultPerS and EgressPerS are the better pass of each kind; Ratio is
	// EgressPerS / DefaultPerS.
	DefaultPerS float64 `json:"default_creates_per_s"`
	EgressPerS  float64 `json:"egress_creates_per_s"`
	Ratio       float64 `json:"ratio"`
}

// settle is the pause after each pass's teardown: namespaces (and links)
// are torn down by the kernel in the background, and that work would fall
// on the next pass.
const settle = 3 * time.Second

// CreateEgress runs the comparison with policy p for the egress passes.
func CreateEgress(ctx context.Context, o Options, p api.NetworkPolicy) (EgressResult, error) {
	o.defaults()
	d, cleanup, err := openNode(ctx, o)
	if err != nil {
		return EgressResult{}, err
	}
	defer cleanup()
	res := EgressResult{N: o.N, Policy: p}
	for _, egress := range []bool{false, true, false, true} {
		req := api.CreateSandboxRequest{Image: o.Image}
		if egress {
			req.Network = &p
		}
		lat, total, failures, first := runLoad(ctx, o.N, o.Parallel, false, func(_, _ int) error {
			_, err := d.Manager.Create(ctx, req)
			return err
		})
		pass := EgressPass{Network: egress, Failures: failures, CreatesPerS: round(float64(o.N-failures)/total.Seconds(), 1)}
		if first != nil {
			pass.FirstError = first.Error()
		}
		l := summarize(lat)
		pass.P50ms, pass.P99ms = l.P50ms, l.P99ms
		t0 := time.Now()
		if err := d.Manager.DeleteAll(ctx); err != nil {
			return res, err
		}
		pass.TeardownS = round(time.Since(t0).Seconds(), 3)
		time.Sleep(settle) // let the kernel finish tearing the namespaces down
		res.Passes = append(res.Passes, pass)
		if egress {
			res.EgressPerS = max(res.EgressPerS, pass.CreatesPerS)
		} else {
			res.DefaultPerS = max(res.DefaultPerS, pass.CreatesPerS)
		}
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
	}
	if res.DefaultPerS > 0 {
		res.Ratio = round(res.EgressPerS/res.DefaultPerS, 2)
	}
	return res, nil
}
