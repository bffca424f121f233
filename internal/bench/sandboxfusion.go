package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// SandboxFusionOptions configures `dsec bench sandboxfusion`.
type SandboxFusionOptions struct {
	// URL is the SandboxFusion endpoint: a node's --sandboxfusion-listen, or
	// a `dsec server` or API server listener with Token.
	URL   string
	Token string
	// N calls, Parallel of them in flight (default: all N at once, a burst).
	N        int
	Parallel int
	// Code and Language are each call's program; it prints its stdin, which
	// is the call's index, so every answer is checked.
	Code     string
	Language string
	// Timeout bounds one call on the client (default 10 minutes).
	Timeout time.Duration
}

// SandboxFusionResult is the outcome of `dsec bench sandboxfusion`.
type SandboxFusionResult struct {
	URL       string  `json:"url"`
	N         int     `json:"n"`
	Parallel  int     `json:"parallel"`
	Language  string  `json:"language"`
	WallS     float64 `json:"wall_s"`
	CallsPerS float64 `json:"calls_per_s"`
	// Latencies of every answered call, from send to the whole answer.
	Latencies
	// HTTPStatus counts the answers by HTTP status ("error": no answer);
	// RunStatus counts the 200s by SandboxFusion status (Success, Failed,
	// SandboxError).
	HTTPStatus map[string]int `json:"http_status"`
	RunStatus  map[string]int `json:"run_status"`
	// WrongOutput counts Success answers whose stdout was not the call's own
	// index.
	WrongOutput int `json:"wrong_output"`
	// OnlyVerdictsOr504 holds when every answer was a 200 with a verdict
	// (Success or Failed, correct output) or a 504 (which verl retries).
	OnlyVerdictsOr504 bool   `json:"only_verdicts_or_504"`
	FirstOther        string `json:"first_other,omitempty"`
}

// SandboxFusion sends N /run_code calls, Parallel at once, and reports the
// latencies and what came back.
func SandboxFusion(ctx context.Context, o SandboxFusionOptions) (SandboxFusionResult, error) {
	if o.URL == "" {
		return SandboxFusionResult{}, errors.New("bench sandboxfusion: the endpoint URL is required")
	}
	if o.N <= 0 {
		o.N = 2000
	}
	if o.Parallel <= 0 || o.Parallel > o.N {
		o.Parallel = o.N
	}
	if o.Language == "" {
		o.Language = "python"
	}
	if o.Code == "" {
		o.Code = "print(input())"
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	url := strings.TrimSuffix(o.URL, "/") + "/run_code"
	tr := &http.Transport{MaxIdleConnsPerHost: o.Parallel, MaxConnsPerHost: 0}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: o.Timeout}
	res := SandboxFusionResult{URL: o.URL, N: o.N, Parallel: o.Parallel, Language: o.Language,
		HTTPStatus: map[string]int{}, RunStatus: map[string]int{}}
	var mu sync.Mutex
	lat := make([]time.Duration, 0, o.N)
	other := func(s string) {
		if res.FirstOther == "" {
			res.FirstOther = s
		}
	}
	jobs := make(chan int)
	var wg sync.WaitGroup
	t0 := time.Now()
	for range o.Parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				status, run, stdout, body, d, err := sfCall(ctx, cl, url, o, i)
				mu.Lock()
				switch {
				case err != nil:
					res.HTTPStatus["error"]++
					other(err.Error())
				default:
					lat = append(lat, d)
					res.HTTPStatus[strconv.Itoa(status)]++
					if status == http.StatusOK {
						res.RunStatus[run]++
						if run == "Success" && strings.TrimSpace(stdout) != strconv.Itoa(i) {
							res.WrongOutput++
							other(fmt.Sprintf("call %d printed %q", i, stdout))
						}
						if run != "Success" && run != "Failed" {
							other(fmt.Sprintf("%d %s", status, body))
						}
					} else if status != http.StatusGatewayTimeout {
						other(fmt.Sprintf("%d %s", status, body))
					}
				}
				mu.Unlock()
			}
		}()
	}
	for i := range o.N {
		select {
		case jobs <- i:
		case <-ctx.Done():
		}
	}
	close(jobs)
	wg.Wait()
	wall := time.Since(t0)
	if err := ctx.Err(); err != nil {
		return res, err
	}
	res.WallS = round(wall.Seconds(), 3)
	res.CallsPerS = round(float64(o.N)/wall.Seconds(), 1)
	res.Latencies = summarize(lat)
	verdicts := res.RunStatus["Success"] + res.RunStatus["Failed"]
	res.OnlyVerdictsOr504 = res.WrongOutput == 0 && res.HTTPStatus["200"] == verdicts &&
		res.HTTPStatus["200"]+res.HTTPStatus["504"] == o.N
	return res, nil
}

// sfCall sends call i and returns its HTTP status, SandboxFusion status, the
// run's stdout, the body (for reports) and the latency.
func sfCall(ctx context.Context, cl *http.Client, url string, o SandboxFusionOptions, i int) (int, string, string, string, time.Duration, error) {
	body, err := json.Marshal(map[string]any{"code": o.Code, "language": o.Language, "stdin": strconv.Itoa(i),
		"run_timeout": 10, "memory_limit_MB": 1024})
	if err != nil {
		return 0, "", "", "", 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", "", "", 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if o.Token != "" {
		req.Header.Set("Authorization", "Bearer "+o.Token)
	}
	t0 := time.Now()
	resp, err := cl.Do(req)
	if err != nil {
		return 0, "", "", "", 0, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(t0)
	if err != nil {
		return 0, "", "", "", 0, err
	}
	var out struct {
		Status    string `json:"status"`
		RunResult *struct {
			Stdout string `json:"stdout"`
		} `json:"run_result"`
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &out); err != nil {
			return resp.StatusCode, "unparsable", "", string(b), d, nil
		}
	}
	stdout := ""
	if out.RunResult != nil {
		stdout = out.RunResult.Stdout
	}
	if len(b) > 300 {
		b = b[:300]
	}
	return resp.StatusCode, out.Status, stdout, string(b), d, nil
}
