package drivertest

import (
	"context"
	"io"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/pkg/api"
)

// EchoScript is the program the PTY benchmarks run on the terminal: cat on a
// raw terminal, after it printed "ready".
const EchoScript = "stty raw -echo; echo ready; exec cat"

// Echoes is a Stdout writer that hands every chunk of output to a benchmark.
type Echoes chan []byte

// NewEchoes returns an Echoes with room for a few chunks.
func NewEchoes() Echoes { return make(Echoes, 64) }

func (w Echoes) Write(p []byte) (int, error) {
	w <- append([]byte(nil), p...)
	return len(p), nil
}

// Drain discards the rest of the output (so the writer never blocks).
func (w Echoes) Drain() {
	go func() {
		for range w {
		}
	}()
}

// BenchPTY measures a keystroke's round trip through a driver's terminal: one
// byte written to the process's stdin stream, read by a program in the sandbox
// (cat on a raw terminal), written back, and out of the stdout stream.
func BenchPTY(b *testing.B, d driver.Driver, layers []driver.Layer) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	inst, err := d.Start(ctx, driver.Spec{ID: NewID("bp"), Layers: layers, CPU: 1, Memory: 256 << 20, Disk: 64 << 20, PidsMax: 64})
	if err != nil {
		b.Fatal(err)
	}
	defer inst.Destroy(context.Background())
	p := sh(EchoScript)
	p.TTY = &api.TermSize{Cols: 80, Rows: 24}
	inR, inW := io.Pipe()
	out := NewEchoes()
	pr, err := inst.Exec(ctx, p, driver.Stdio{Stdin: inR, Stdout: out})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = pr.Signal(int(unix.SIGKILL))
		inW.Close()
		out.Drain()
		_, _ = pr.Wait(ctx)
		pr.Close()
	}()
	KeystrokeRoundTrips(b, inW, out)
}

// KeystrokeRoundTrips waits for EchoScript's "ready" on out, then b.N times
// writes one byte to in and waits for it on out; it reports p50 and p99 in
// microseconds besides ns/op.
func KeystrokeRoundTrips(b *testing.B, in io.Writer, out Echoes) {
	var seen []byte
	for !strings.Contains(string(seen), "ready") {
		select {
		case c := <-out:
			seen = append(seen, c...)
		case <-time.After(10 * time.Second):
			b.Fatalf("no prompt from cat: %q", seen)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	key := []byte{'k'}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := in.Write(key); err != nil {
			b.Fatal(err)
		}
		select {
		case c := <-out:
			if len(c) == 0 || c[len(c)-1] != 'k' {
				b.Fatalf("echo %q, want k", c)
			}
		case <-time.After(10 * time.Second):
			b.Fatal("no echo within 10s")
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
}
