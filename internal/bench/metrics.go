package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	daemon "github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/pkg/api"
)

// MetricsResult is the outcome of `dsec bench metrics`.
type MetricsResult struct {
	Sandboxes int     `json:"sandboxes"`
	CreateS   float64 `json:"create_s"`
	Scrapes   int     `json:"scrapes"`
	// FirstMs is the first scrape, which reads every sandbox's memory counter;
	// later ones read states live and memory from a sample at most 10 s old.
	FirstMs float64 `json:"first_ms"`
	Latencies
	Bytes     int64  `json:"bytes"`
	StoppedBy string `json:"stopped_by,omitempty"`
}

// Metrics holds N idle sandboxes on a node of its own and scrapes GET
// /metrics (with the token, over HTTP on loopback) scrapes times.
func Metrics(ctx context.Context, o Options, scrapes int) (MetricsResult, error) {
	o.defaults()
	d, cleanup, err := openNode(ctx, o)
	if err != nil {
		return MetricsResult{}, err
	}
	defer cleanup()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return MetricsResult{}, err
	}
	go func() { _ = d.Serve(l) }()
	res := MetricsResult{Scrapes: scrapes}
	_, wall, _, stop := runLoad(ctx, o.N, o.Parallel, true, func(_, _ int) error {
		_, err := d.Manager.Create(ctx, api.CreateSandboxRequest{Image: o.Image, MemoryBytes: 64 << 20, DiskBytes: 16 << 20})
		return err
	})
	res.CreateS, res.Sandboxes = round(wall.Seconds(), 3), d.Manager.Count()
	if stop != nil {
		res.StoppedBy = stop.Error()
	}
	scrape := func() (time.Duration, int64, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+l.Addr().String()+daemon.MetricsPath, nil)
		req.Header.Set("Authorization", "Bearer "+d.Token)
		t0 := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, 0, err
		}
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET /metrics: %s", resp.Status)
		}
		return time.Since(t0), n, err
	}
	first, _, err := scrape()
	if err != nil {
		return res, err
	}
	res.FirstMs = ms(first)
	lat := make([]time.Duration, 0, scrapes)
	for range scrapes {
		d, n, err := scrape()
		if err != nil {
			return res, err
		}
		lat, res.Bytes = append(lat, d), n
	}
	res.Latencies = summarize(lat)
	return res, ctx.Err()
}
