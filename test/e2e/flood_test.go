package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/pkg/api"
)

// floodSeconds is how long each `yes` runs: 15 s, or DSEC_FLOOD_SECONDS
// (60 for the minute).
func floodSeconds() int {
	if n, err := strconv.Atoi(os.Getenv("DSEC_FLOOD_SECONDS")); err == nil && n > 0 {
		return n
	}
	return 15
}

// TestOutputFlood runs `yes` through blocking exec, streaming exec and a
// background process at once, in three sandboxes, while a fourth answers
// `true` execs: captured output stays bounded (the blocking result at
// max_output_bytes, the background log on disk at its cap plus a marker),
// the server's RSS stays flat and the neighbour keeps answering.
func TestOutputFlood(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	blocking := n.create(t, api.CreateSandboxRequest{})
	streaming := n.create(t, api.CreateSandboxRequest{})
	bg := n.create(t, api.CreateSandboxRequest{})
	neighbour := n.create(t, api.CreateSandboxRequest{})
	yes := fmt.Sprintf("timeout %d yes", floodSeconds())

	var base []time.Duration
	for range 20 {
		t0 := time.Now()
		if r, err := n.cl.Exec(ctx, neighbour, api.ExecRequest{Cmd: []string{"true"}}); err != nil || r.ExitCode != 0 {
			t.Fatalf("neighbour exec: %+v %v", r, err)
		}
		base = append(base, time.Since(t0))
	}
	sort.Slice(base, func(i, j int) bool { return base[i] < base[j] })
	rss0 := rssKB(t, n.cmd.Process.Pid)
	var maxRSS atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // sample the server's RSS
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
				if v := rssKB(t, n.cmd.Process.Pid); v > maxRSS.Load() {
					maxRSS.Store(v)
				}
			}
		}
	}()
	var lat []time.Duration
	var latMu sync.Mutex
	wg.Add(1)
	go func() { // the neighbour answers meanwhile
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			t0 := time.Now()
			r, err := n.cl.Exec(ctx, neighbour, api.ExecRequest{Cmd: []string{"true"}, TimeoutMs: 30_000})
			if err != nil || r.ExitCode != 0 {
				t.Errorf("neighbour exec: %+v %v", r, err)
				return
			}
			latMu.Lock()
			lat = append(lat, time.Since(t0))
			latMu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
	}()

	p, err := n.cl.StartProcess(ctx, bg, api.ExecRequest{Shell: yes + " >&2 & " + yes})
	if err != nil {
		t.Fatal(err)
	}
	var streamed atomic.Int64
	var floods sync.WaitGroup
	floods.Add(2)
	go func() {
		defer floods.Done()
		r, err := n.cl.Exec(ctx, blocking, api.ExecRequest{Shell: yes, TimeoutMs: 60_000})
		if err != nil {
			t.Errorf("blocking exec: %v", err)
			return
		}
		if !r.StdoutTruncated || len(r.Stdout) != 1<<20 {
			t.Errorf("blocking exec: %d bytes, truncated %v (want the 1 MiB default)", len(r.Stdout), r.StdoutTruncated)
		}
	}()
	go func() {
		defer floods.Done()
		w := countWriter{&streamed}
		if _, err := n.cl.ExecStream(ctx, streaming, api.ExecRequest{Shell: yes, TimeoutMs: 60_000}, nil, w, io.Discard); err != nil {
			t.Errorf("streaming exec: %v", err)
		}
	}()
	floods.Wait()
	if _, err := n.cl.WaitProcess(ctx, bg, p.ID, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	rss1 := rssKB(t, n.cmd.Process.Pid)

	// The background logs on disk: the cap, then the marker, nothing more.
	marker := fmt.Sprintf("\n[dsec: output truncated after %d bytes]\n", agent.DefaultMaxLogBytes)
	for _, stream := range []string{"stdout", "stderr"} {
		path := filepath.Join(n.dataDir, "logs", bg, p.ID+"."+stream)
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() != int64(agent.DefaultMaxLogBytes+len(marker)) {
			t.Errorf("%s log: %d bytes, want %d", stream, st.Size(), agent.DefaultMaxLogBytes+len(marker))
		}
		rc, err := n.cl.ProcessLogs(ctx, bg, p.ID, stream, int64(agent.DefaultMaxLogBytes))
		if err != nil {
			t.Fatal(err)
		}
		tail, _ := io.ReadAll(rc)
		rc.Close()
		if string(tail) != marker {
			t.Errorf("%s log tail %q, want the marker", stream, tail)
		}
	}

	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) == 0 {
		t.Fatal("no neighbour execs")
	}
	p50, pmax := lat[len(lat)/2], lat[len(lat)-1]
	t.Logf("streamed %d MB in %ds; server RSS %d -> max %d -> %d KB; neighbour exec p50 %v max %v over %d execs (before the flood: p50 %v)",
		streamed.Load()>>20, floodSeconds(), rss0, maxRSS.Load(), rss1, p50.Round(time.Microsecond), pmax.Round(time.Microsecond), len(lat),
		base[len(base)/2].Round(time.Microsecond))
	if streamed.Load() < 10<<20 {
		t.Errorf("streaming exec delivered only %d bytes", streamed.Load())
	}
	if grow := maxRSS.Load() - rss0; grow > 64<<10 {
		t.Errorf("server RSS grew by %d KB during the flood", grow)
	}
	if pmax > 5*time.Second {
		t.Errorf("neighbour exec took up to %v during the flood", pmax)
	}
}

type countWriter struct{ n *atomic.Int64 }

func (w countWriter) Write(p []byte) (int, error) { w.n.Add(int64(len(p))); return len(p), nil }

// rssKB is VmRSS of pid.
func rssKB(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
