package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// BurstOptions configure `dsec bench burst`.
type BurstOptions struct {
	N        int    // creates sent
	Limit    int    // the server's --max-sandboxes
	Parallel int    // requests in flight at once
	Image    string // "" = the server's default
	// Timeout is how long one create may take before it counts as hung.
	Timeout time.Duration
	Bin     string // dsec binary ("" = this executable)
	DataDir string // "" = a scratch dir under /var/lib/dsec, removed afterwards
}

// BurstResult is the outcome of a burst: what every create was answered.
type BurstResult struct {
	N        int `json:"n"`
	Limit    int `json:"limit"`
	Parallel int `json:"parallel"`
	// Created, Exhausted, Other and Hung partition the N creates: 201,
	// 429 resource_exhausted, any other answer or transport error, and no
	// answer within timeout_s.
	Created   int     `json:"created"`
	Exhausted int     `json:"resource_exhausted"`
	Other     int     `json:"other_errors"`
	Hung      int     `json:"hung"`
	TimeoutS  float64 `json:"timeout_s"`
	// WithRetryAfter counts the resource_exhausted answers with a Retry-After.
	WithRetryAfter int    `json:"with_retry_after"`
	FirstOther     string `json:"first_other_error,omitempty"`
	// Listed is how many sandboxes the server lists after the burst (must be
	// Created: none lost, none extra).
	Listed int `json:"listed"`
	// Exact: Created == Listed == Limit, every other create refused with
	// resource_exhausted and Retry-After, none hung.
	Exact       bool    `json:"exact"`
	WallS       float64 `json:"wall_s"`
	CreateP50ms float64 `json:"create_p50_ms"`
	CreateP99ms float64 `json:"create_p99_ms"`
	RejectP50ms float64 `json:"reject_p50_ms"`
	RejectP99ms float64 `json:"reject_p99_ms"`
	RejectMaxms float64 `json:"reject_max_ms"`
	// Server RSS (KiB) before the burst, its peak during it, and after it.
	RSSStartKB int64   `json:"server_rss_start_kb"`
	RSSMaxKB   int64   `json:"server_rss_max_kb"`
	RSSEndKB   int64   `json:"server_rss_end_kb"`
	TeardownS  float64 `json:"teardown_s"`
	Path       string  `json:"path"`
}

// Burst starts a `dsec server --max-sandboxes Limit` process and sends it N
// creates, Parallel at a time, each with its own request ID, over plain HTTP
// with no client retries, then checks what the server lists and deletes
// everything.
func Burst(ctx context.Context, o BurstOptions) (BurstResult, error) {
	if o.N <= 0 || o.Limit <= 0 {
		return BurstResult{}, fmt.Errorf("bench burst: --n and --max-sandboxes must be positive")
	}
	o.Parallel = max(o.Parallel, 1)
	if o.Timeout <= 0 {
		o.Timeout = 60 * time.Second
	}
	srv, err := startServer(ctx, o.Bin, o.DataDir, "--max-sandboxes", fmt.Sprint(o.Limit), "--log-level", "warn")
	if err != nil {
		return BurstResult{}, err
	}
	defer srv.stop()
	res := BurstResult{N: o.N, Limit: o.Limit, Parallel: o.Parallel, TimeoutS: o.Timeout.Seconds(),
		Path: "HTTP API of a dsec server process, one connection per worker, no client retries"}
	tr := &http.Transport{MaxIdleConnsPerHost: o.Parallel, MaxConnsPerHost: o.Parallel}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}

	var rssMax atomic.Int64
	res.RSSStartKB = rssKB(srv.Pid())
	rssMax.Store(res.RSSStartKB)
	stopSampling := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(100 * time.Millisecond):
				if v := rssKB(srv.Pid()); v > rssMax.Load() {
					rssMax.Store(v)
				}
			}
		}
	}()

	var mu sync.Mutex
	var created, rejected []time.Duration
	t0 := time.Now()
	runLoad(ctx, o.N, o.Parallel, false, func(_, i int) error {
		a := burstCreate(ctx, hc, srv, o, fmt.Sprintf("burst-%d", i))
		mu.Lock()
		defer mu.Unlock()
		switch {
		case a.hung:
			res.Hung++
		case a.status == http.StatusCreated:
			res.Created++
			created = append(created, a.took)
		case a.status == http.StatusTooManyRequests && a.code == api.CodeResourceExhausted:
			res.Exhausted++
			rejected = append(rejected, a.took)
			if a.retryAfter != "" {
				res.WithRetryAfter++
			}
		default:
			res.Other++
			if res.FirstOther == "" {
				res.FirstOther = a.err
			}
		}
		return nil
	})
	res.WallS = round(time.Since(t0).Seconds(), 3)
	close(stopSampling)
	sampler.Wait()
	res.RSSMaxKB, res.RSSEndKB = rssMax.Load(), rssKB(srv.Pid())
	c, r := summarize(created), summarize(rejected)
	res.CreateP50ms, res.CreateP99ms = c.P50ms, c.P99ms
	res.RejectP50ms, res.RejectP99ms, res.RejectMaxms = r.P50ms, r.P99ms, r.Maxms

	sbs, err := srv.Client().List(ctx)
	if err != nil {
		return res, fmt.Errorf("bench burst: list after the burst: %w", err)
	}
	res.Listed = len(sbs)
	res.Exact = res.Created == o.Limit && res.Listed == o.Limit && res.Exhausted == o.N-o.Limit &&
		res.WithRetryAfter == res.Exhausted && res.Hung == 0
	t1 := time.Now()
	err = srv.deleteAll(context.WithoutCancel(ctx), 8)
	res.TeardownS = round(time.Since(t1).Seconds(), 3)
	return res, errors.Join(err, ctx.Err())
}

// burstAnswer is what one create got.
type burstAnswer struct {
	status     int
	code       api.Code
	retryAfter string
	err        string
	hung       bool
	took       time.Duration
}

func burstCreate(ctx context.Context, hc *http.Client, srv *serverProc, o BurstOptions, reqID string) burstAnswer {
	body, _ := json.Marshal(api.CreateSandboxRequest{Image: o.Image, RequestID: reqID})
	rctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, srv.Addr+"/v1/sandboxes", bytes.NewReader(body))
	if err != nil {
		return burstAnswer{err: err.Error()}
	}
	req.Header.Set("Authorization", "Bearer "+srv.Token)
	req.Header.Set("Content-Type", "application/json")
	t := time.Now()
	resp, err := hc.Do(req)
	a := burstAnswer{took: time.Since(t)}
	if err != nil {
		a.hung = rctx.Err() != nil && ctx.Err() == nil
		a.err = err.Error()
		return a
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	a.took = time.Since(t)
	a.status, a.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
	if resp.StatusCode != http.StatusCreated {
		var eb api.ErrorBody
		if json.Unmarshal(b, &eb) == nil && eb.Error != nil {
			a.code = eb.Error.Code
		}
		a.err = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	return a
}
