package metrics_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/metrics"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// The target node: 3,200 sandboxes.
const targetSandboxes = 3200

// fakeNode is a node of n sandboxes for the exposition's size (which does not
// depend on where the samples come from).
type fakeNode struct{ n int }

func (f fakeNode) Usage(bool) []api.SandboxUsage {
	out := make([]api.SandboxUsage, f.n)
	for i := range out {
		out[i] = api.SandboxUsage{Backend: []string{"container", "microvm"}[i%2], State: api.StateRunning,
			MemoryLimitBytes: 512 << 20, MemoryBytes: int64(i) << 16}
	}
	return out
}

func (fakeNode) Capacity() int { return 100000 }

func (fakeNode) WarmPool() (waiting, size int) { return 0, 0 }

// With 3,200 sandboxes and every route, method and status series a busy node
// has (dsec server), or every node RPC procedure and code series a busy agent
// has, the exposition stays under 200 KB.
func TestExpositionSize(t *testing.T) {
	for _, c := range []struct {
		name        string
		routes, rpc int // HTTP routes (x 5 statuses); RPC procedures (x 4 codes)
	}{
		// 60 routes: more than /v1, E2B and SandboxFusion have.
		{"server", 60, 0},
		// An agent serves /metrics and the node RPC's path over HTTP; 60
		// procedures: more than the node RPC's 48 methods and 7 streams.
		{"agent", 2, 60},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := metrics.New(metrics.Options{Backends: []string{"container", "microvm", "fullvm", "fncall"}, DefaultBackend: "container"})
			if err := m.Register(m.NewNodeCollector(fakeNode{targetSandboxes}, nil, nil)); err != nil {
				t.Fatal(err)
			}
			h := m.HTTP(func(r *http.Request) string { return r.URL.Path }, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				st, _ := strconv.Atoi(r.URL.Query().Get("status"))
				w.Header().Set(metrics.ErrorHeader, r.URL.Query().Get("code"))
				w.WriteHeader(st)
			}))
			for i := range c.routes {
				for _, st := range []string{"200", "201", "400", "404", "500"} {
					code := map[string]string{"400": "invalid_argument", "404": "not_found", "500": "internal"}[st]
					h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", fmt.Sprintf("/route/%d?status=%s&code=%s", i, st, code), nil))
				}
			}
			for i := range c.rpc {
				for _, code := range []string{"ok", "not_found", "resource_exhausted", "unauthorized"} {
					m.RPC(fmt.Sprintf("ProcedureNo%02d", i), code, time.Millisecond)
				}
			}
			rec := httptest.NewRecorder()
			m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			size := rec.Body.Len()
			t.Logf("exposition with %d sandboxes: %d bytes", targetSandboxes, size)
			if size > 200_000 {
				t.Errorf("exposition is %d bytes, over 200 KB", size)
			}
			if !strings.Contains(rec.Body.String(), `dsec_sandbox_memory_usage_bytes_count 3200`) {
				t.Errorf("memory histogram does not count the sandboxes")
			}
		})
	}
}

// statsDriver gives the mock's instances a memory counter read from a real
// cgroup file, as the container driver's are, so a scrape pays the read.
type statsDriver struct{ driver.Driver }

type statsInstance struct{ driver.Instance }

func (d statsDriver) Start(ctx context.Context, spec driver.Spec) (driver.Instance, error) {
	inst, err := d.Driver.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	return statsInstance{inst}, nil
}

// memoryFile is a memory cgroup's usage file below the root (a sandbox's
// costs what a child's does; the root's sums the whole host and costs 5x), else
// a /proc file.
var memoryFile = sync.OnceValue(func() string {
	for _, root := range []string{"/sys/fs/cgroup/memory", "/sys/fs/cgroup"} {
		ents, _ := os.ReadDir(root)
		for _, e := range ents {
			for _, f := range []string{"memory.usage_in_bytes", "memory.current"} {
				p := root + "/" + e.Name() + "/" + f
				if _, err := os.Stat(p); err == nil && e.IsDir() {
					return p
				}
			}
		}
	}
	return "/proc/self/statm"
})

func (statsInstance) MemoryUsage() (int64, error) {
	b, err := os.ReadFile(memoryFile())
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.Fields(string(b))[0], 10, 64)
}

// BenchmarkScrape3200 scrapes /metrics over HTTP on a node of 3,200 mock
// sandboxes whose memory counters are real cgroup file reads.
func BenchmarkScrape3200(b *testing.B) {
	s := newStack(b, func(d driver.Driver) driver.Driver { return statsDriver{d} })
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < targetSandboxes; i += 8 {
				if _, err := s.mgr.Create(ctx, api.CreateSandboxRequest{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	if n := s.mgr.Count(); n != targetSandboxes {
		b.Fatalf("%d sandboxes", n)
	}
	req, _ := http.NewRequest(http.MethodGet, s.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	t0 := time.Now()
	scrape(b, s.url) // the first scrape reads every memory counter
	first := time.Since(t0)
	var size int64
	var worst time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		size, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		worst = max(worst, time.Since(t0))
	}
	b.ReportMetric(float64(size), "bytes/scrape")
	b.ReportMetric(float64(worst.Microseconds())/1000, "worst-ms")
	b.ReportMetric(float64(first.Microseconds())/1000, "first-ms")
}

// BenchmarkExecDecorator is the metrics decorator's cost per exec: the same
// exec on a node agent over the mock driver, bare and wrapped. The command is
// one the mock does not find: a real exec, answered (exit 127) without
// spawning a process, so the decorator's cost is not lost in a spawn's.
func BenchmarkExecDecorator(b *testing.B) {
	node := agenttest.NewNode(b)
	ctx := context.Background()
	sb, err := node.Create(ctx, api.CreateSandboxRequest{})
	if err != nil {
		b.Fatal(err)
	}
	m := metrics.New(metrics.Options{Backends: []string{"container"}, DefaultBackend: "container", NoProcess: true})
	req := api.ExecRequest{Cmd: []string{"dsec-bench-no-such-command"}}
	if res, err := node.Exec(ctx, sb.ID, req); err != nil || res.ExitCode != 127 {
		b.Fatalf("exec of a missing command: %+v %v, want exit 127", res, err)
	}
	for _, c := range []struct {
		name string
		exec func(context.Context, string, api.ExecRequest) (api.ExecResult, error)
	}{{"bare", node.Exec}, {"metrics", m.Wrap(node, nil).Exec}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.exec(ctx, sb.ID, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// memNode is a node of one sandbox whose memory use a test sets.
type memNode struct{ mem atomic.Int64 }

func (n *memNode) Usage(memory bool) []api.SandboxUsage {
	u := api.SandboxUsage{Backend: "container", State: api.StateRunning, MemoryBytes: -1}
	if memory {
		u.MemoryBytes = n.mem.Load()
	}
	return []api.SandboxUsage{u}
}

func (*memNode) Capacity() int { return 1 }

func (*memNode) WarmPool() (waiting, size int) { return 0, 0 }

// Without Run, a scrape reads memory itself when the sample is too old; with
// Run, the sample is refreshed in the background.
func TestMemoryHistogramRefreshes(t *testing.T) {
	m := metrics.New(metrics.Options{Backends: []string{"container"}, DefaultBackend: "container", NoProcess: true})
	node := &memNode{}
	node.mem.Store(100 << 20)
	c := m.NewNodeCollector(node, nil, nil)
	c.MemoryMaxAge = 20 * time.Millisecond
	if err := m.Register(c); err != nil {
		t.Fatal(err)
	}
	sum := func() float64 {
		fams, err := m.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() == "dsec_sandbox_memory_usage_bytes" {
				return f.GetMetric()[0].GetHistogram().GetSampleSum()
			}
		}
		t.Fatal("no memory histogram")
		return 0
	}
	waitSum := func(want float64) {
		t.Helper()
		if !testwait.Until(10*time.Second, func() bool { return sum() == want }) {
			t.Fatalf("memory sum %v, want %v", sum(), want)
		}
	}
	if got := sum(); got != 100<<20 {
		t.Fatalf("first scrape: %v", got)
	}
	node.mem.Store(200 << 20)
	waitSum(200 << 20) // the scrape read it once the sample was too old
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	node.mem.Store(300 << 20)
	waitSum(300 << 20)
	cancel()
	<-done
}
