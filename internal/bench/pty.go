package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// PTYResult is the outcome of `dsec bench pty`.
type PTYResult struct {
	N     int     `json:"n"`
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
	Maxms float64 `json:"max_ms"`
	// KeysPerS is the keystrokes per second of the sequence (one in flight).
	KeysPerS float64 `json:"keys_per_s"`
	Failures int     `json:"failures"`
	Path     string  `json:"path"`
	// ExecTrueP50ms is `bench exec`'s figure (a blocking exec of true) taken on
	// the same node in the same run, for reference.
	ExecTrueP50ms float64 `json:"exec_true_p50_ms"`
	ExecTrueP99ms float64 `json:"exec_true_p99_ms"`
	FirstError    string  `json:"first_error,omitempty"`
}

// ptyWarmup keystrokes are typed before the measured ones.
const ptyWarmup = 20

// PTY measures a keystroke's round trip through the API: one byte typed into a
// terminal exec (a `cat` with the terminal in raw mode, so the program itself
// echoes each byte as an interactive program does) until that byte is back at the
// client; N keystrokes in sequence, one at a time.
func PTY(ctx context.Context, o Options) (PTYResult, error) {
	o.defaults()
	cl, cleanup, err := openAPINode(ctx, o)
	if err != nil {
		return PTYResult{}, err
	}
	defer cleanup()
	sb, err := cl.Create(ctx, api.CreateSandboxRequest{Image: o.Image})
	if err != nil {
		return PTYResult{}, fmt.Errorf("create: %w", err)
	}
	echo := make(chan []byte, 64)
	s, err := cl.StartExecStream(ctx, sb.ID, api.ExecRequest{TTY: true, Shell: "stty raw -echo && echo ready && exec cat"},
		client.StreamOptions{Stdout: chanWriter(echo)})
	if err != nil {
		return PTYResult{}, fmt.Errorf("tty exec: %w", err)
	}
	defer s.Close()
	var seen []byte
	// await reads the terminal until want arrived (and consumes through it).
	await := func(want []byte) error {
		t := time.NewTimer(10 * time.Second)
		defer t.Stop()
		for {
			if i := bytes.Index(seen, want); i >= 0 {
				seen = seen[i+len(want):]
				return nil
			}
			select {
			case b := <-echo:
				seen = append(seen, b...)
			case <-t.C:
				return fmt.Errorf("no echo of %q (terminal shows %q)", want, seen)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	if err := await([]byte("ready\n")); err != nil { // raw mode: no "\r" added
		return PTYResult{}, err
	}
	key := func(i int) error {
		k := []byte{'a' + byte(i%26)}
		if _, err := s.Write(k); err != nil {
			return err
		}
		return await(k)
	}
	for i := range ptyWarmup {
		if err := key(i); err != nil {
			return PTYResult{}, fmt.Errorf("warm-up keystroke: %w", err)
		}
	}
	res := PTYResult{N: o.N, Path: "HTTP API on loopback (Go client), exec/stream with tty, raw-mode cat echoing"}
	lat, wall, failures, first := runLoad(ctx, o.N, 1, true, func(_, i int) error { return key(i) })
	res.KeysPerS = round(float64(o.N-failures)/wall.Seconds(), 1)
	res.Failures = failures
	if first != nil {
		res.FirstError = first.Error()
	}
	ls := summarize(lat)
	res.P50ms, res.P99ms, res.Maxms = ls.P50ms, ls.P99ms, ls.Maxms
	if failures > 0 {
		return res, errors.Join(ctx.Err(), first)
	}

	// Reference: blocking execs of true in the same sandbox, now.
	lat, _, _, first = runLoad(ctx, o.N, 1, true, func(int, int) error { return execTrue(ctx, cl, sb.ID) })
	if first != nil {
		return res, fmt.Errorf("reference exec: %w", first)
	}
	ls = summarize(lat)
	res.ExecTrueP50ms, res.ExecTrueP99ms = ls.P50ms, ls.P99ms
	return res, ctx.Err()
}

// chanWriter hands every write's bytes to a channel.
type chanWriter chan<- []byte

func (c chanWriter) Write(p []byte) (int, error) {
	c <- append([]byte(nil), p...)
	return len(p), nil
}
