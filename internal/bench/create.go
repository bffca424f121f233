package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/dsec-dev/dsec/internal/bench/peer"
	"github.com/dsec-dev/dsec/pkg/api"
)

// CreateResult is the outcome of `dsec bench create`.
type CreateResult struct {
	N           int                    `json:"n"`
	Parallel    int                    `json:"parallel"`
	Image       string                 `json:"image"`
	CreatesPerS float64                `json:"creates_per_s"`
	P50ms       float64                `json:"p50_ms"`
	P99ms       float64                `json:"p99_ms"`
	Maxms       float64                `json:"max_ms"`
	TeardownS   float64                `json:"teardown_s"`
	Failures    int                    `json:"failures"`
	Peers       map[string]peer.Result `json:"peers,omitempty"`
	RatioVsCrun float64                `json:"ratio_vs_crun,omitempty"`
	RatioVsRunc float64                `json:"ratio_vs_runc,omitempty"`
	Path        string                 `json:"path"`
	FirstError  string                 `json:"first_error,omitempty"`
	// UserNS compares creates with and without a user namespace, taken
	// alternately in one run (--userns both).
	UserNS *UserNSCompare `json:"userns,omitempty"`
}

// UserNSCompare is create latency with and without a user namespace.
type UserNSCompare struct {
	N         int     `json:"n_each"`
	OffP50ms  float64 `json:"off_p50_ms"`
	OnP50ms   float64 `json:"on_p50_ms"`
	OffMeanms float64 `json:"off_mean_ms"`
	OnMeanms  float64 `json:"on_mean_ms"`
	// CostPct is (on - off) / off of the medians, in percent.
	CostPct float64 `json:"cost_pct"`
}

// userNSFor is the user_namespace field of create number i.
func userNSFor(mode string, i int) (*bool, error) {
	on, off := true, false
	switch mode {
	case "":
		return nil, nil
	case "on":
		return &on, nil
	case "off":
		return &off, nil
	case "both":
		if i%2 == 1 {
			return &on, nil
		}
		return &off, nil
	}
	return nil, fmt.Errorf("--userns %q: want on, off or both", mode)
}

func compareUserNS(lat []time.Duration) *UserNSCompare {
	var on, off []time.Duration
	for i, l := range lat {
		if l <= 0 {
			continue
		}
		if i%2 == 1 {
			on = append(on, l)
		} else {
			off = append(off, l)
		}
	}
	mean := func(ds []time.Duration) float64 {
		var t time.Duration
		for _, d := range ds {
			t += d
		}
		if len(ds) == 0 {
			return 0
		}
		return round(float64(t)/float64(len(ds))/1e6, 3)
	}
	c := &UserNSCompare{N: min(len(on), len(off)), OffP50ms: summarize(off).P50ms, OnP50ms: summarize(on).P50ms,
		OffMeanms: mean(off), OnMeanms: mean(on)}
	if c.OffP50ms > 0 {
		c.CostPct = round((c.OnP50ms-c.OffP50ms)/c.OffP50ms*100, 1)
	}
	return c
}

// Create creates and starts N sandboxes (idle init) through the node agent with P
// workers, then deletes them; then runs each peer runtime on the same rootfs.
func Create(ctx context.Context, o Options, compare []string) (CreateResult, error) {
	o.defaults()
	if _, err := userNSFor(o.UserNS, 0); err != nil {
		return CreateResult{}, err
	}
	d, cleanup, err := openNode(ctx, o)
	if err != nil {
		return CreateResult{}, err
	}
	img, err := d.Manager.ImageLower(o.Image)
	if err != nil {
		cleanup()
		return CreateResult{}, err
	}
	if len(compare) > 0 && len(img.Lower()) != 1 {
		cleanup()
		return CreateResult{}, fmt.Errorf("--compare runs peers on one rootfs directory; image %q has %d lower directories (a layered environment has none until mounted)", img.Name, len(img.Lower()))
	}
	res := CreateResult{N: o.N, Parallel: o.Parallel, Image: img.Name, Path: "agent (in-process, no HTTP)"}
	lat, total, failures, first := runLoad(ctx, o.N, o.Parallel, false, func(_, i int) error {
		uns, _ := userNSFor(o.UserNS, i)
		_, err := d.Manager.Create(ctx, api.CreateSandboxRequest{Image: o.Image, UserNamespace: uns})
		return err
	})
	if o.UserNS == "both" {
		res.UserNS = compareUserNS(lat)
	}
	res.Failures = failures
	if first != nil {
		res.FirstError = first.Error()
	}
	t1 := time.Now()
	cleanup()
	res.TeardownS = round(time.Since(t1).Seconds(), 3)
	l := summarize(lat)
	res.P50ms, res.P99ms, res.Maxms = l.P50ms, l.P99ms, l.Maxms
	res.CreatesPerS = round(float64(o.N-res.Failures)/total.Seconds(), 1)
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	for _, name := range compare {
		rt, err := peer.Find(name)
		if err != nil {
			return res, err
		}
		pr, err := rt.Bench(ctx, img.Lower()[0], o.N, o.Parallel)
		if err != nil {
			return res, fmt.Errorf("%s: %w", name, err)
		}
		if res.Peers == nil {
			res.Peers = map[string]peer.Result{}
		}
		res.Peers[name] = pr
		if pr.PerSecond > 0 {
			ratio := round(res.CreatesPerS/pr.PerSecond, 2)
			switch name {
			case "crun":
				res.RatioVsCrun = ratio
			case "runc":
				res.RatioVsRunc = ratio
			}
		}
	}
	return res, nil
}
