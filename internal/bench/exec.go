package bench

import (
	"context"
	"fmt"
	"net"

	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// ExecResult is the outcome of `dsec bench exec`.
type ExecResult struct {
	N          int     `json:"n"`
	Parallel   int     `json:"parallel"`
	ExecsPerS  float64 `json:"execs_per_s"`
	P50ms      float64 `json:"p50_ms"`
	P99ms      float64 `json:"p99_ms"`
	Maxms      float64 `json:"max_ms"`
	Failures   int     `json:"failures"`
	Path       string  `json:"path"`
	FirstError string  `json:"first_error,omitempty"`
}

// Exec runs `true` N times through the HTTP API (client → server → agent → init)
// with P workers, each on its own sandbox.
func Exec(ctx context.Context, o Options) (ExecResult, error) {
	o.defaults()
	cl, cleanup, err := openAPINode(ctx, o)
	if err != nil {
		return ExecResult{}, err
	}
	defer cleanup()
	ids := make([]string, o.Parallel)
	for i := range ids {
		sb, err := cl.Create(ctx, api.CreateSandboxRequest{Image: o.Image})
		if err != nil {
			return ExecResult{}, fmt.Errorf("create: %w", err)
		}
		ids[i] = sb.ID
		// Warm up the connection and the sandbox.
		if err := execTrue(ctx, cl, sb.ID); err != nil {
			return ExecResult{}, fmt.Errorf("warm-up exec: %w", err)
		}
	}
	res := ExecResult{N: o.N, Parallel: o.Parallel, Path: "HTTP API on loopback (Go client)"}
	lat, total, failures, first := runLoad(ctx, o.N, o.Parallel, false, func(w, _ int) error {
		return execTrue(ctx, cl, ids[w])
	})
	res.Failures = failures
	if first != nil {
		res.FirstError = first.Error()
	}
	ls := summarize(lat)
	res.P50ms, res.P99ms, res.Maxms = ls.P50ms, ls.P99ms, ls.Maxms
	res.ExecsPerS = round(float64(o.N-res.Failures)/total.Seconds(), 1)
	return res, ctx.Err()
}

// execTrue runs `true` through the API: the operation `bench exec` times.
func execTrue(ctx context.Context, cl *client.Client, id string) error {
	r, err := cl.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}})
	if err == nil && r.ExitCode != 0 {
		err = fmt.Errorf("exit code %d: %s", r.ExitCode, r.Stderr)
	}
	return err
}

// openAPINode starts a private node serving its HTTP API on a loopback port and
// returns a client of it; cleanup stops both.
func openAPINode(ctx context.Context, o Options) (*client.Client, func(), error) {
	d, cleanup, err := openNode(ctx, o)
	if err != nil {
		return nil, nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	go func() { _ = d.Serve(l) }()
	return client.New("http://"+l.Addr().String(), d.Token), func() { cleanup(); l.Close() }, nil
}
