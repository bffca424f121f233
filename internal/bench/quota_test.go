package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/apiserver"
	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/cluster/noderpc"
	"github.com/dsec-dev/dsec/internal/cluster/placement"
	"github.com/dsec-dev/dsec/internal/project"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// labelNode is a simulated agent that keeps a create's labels (the project
// guard reads its reservation back from them).
type labelNode struct{ *simNode }

func (n labelNode) Create(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	sb, err := n.simNode.Create(ctx, req)
	sb.Labels = req.Labels
	return sb, err
}

// BenchmarkClusterQuota measures what a quota costs per create through one
// real API server (HTTP, auth, placement, request-ID claim, node RPC to 20
// simulated agents, in-process etcd): rounds of creates with a token of an
// unlimited project and of a project with a quota, interleaved in one run,
// sequentially (latency) and 32 in flight (contention on the project's usage
// key). Run: go test -run x -bench ClusterQuota -benchtime 1x ./internal/bench/
func BenchmarkClusterQuota(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := b.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cli, stop, err := benchEtcd(ctx, dir, log)
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	const nodes, prefix = 20, "/bench-quota/"
	secretRaw := []byte("bench-quota-secret-0123456789")
	secret, err := cluster.NewSecret(string(secretRaw))
	if err != nil {
		b.Fatal(err)
	}
	for i := range nodes {
		n := &simNode{name: fmt.Sprintf("sim%02d", i), max: 1 << 40}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		path, h := noderpc.NewHandler(labelNode{n}, noderpc.HandlerOptions{Secret: secretRaw, Logger: log})
		mux := http.NewServeMux()
		mux.Handle(path, h)
		srv := noderpc.NewServer(mux, noderpc.ServerOptions{Logger: log})
		go func() { _ = srv.Serve(l) }()
		defer srv.Close()
		addr := "http://" + l.Addr().String()
		report := func(context.Context) (cluster.NodeRecord, error) {
			return cluster.NodeRecord{Name: n.name, Addr: addr, Backends: []string{api.BackendContainer},
				Capacity: placement.Resources{Sandboxes: n.max}, Load: placement.Resources{Sandboxes: n.n.Load()}}, nil
		}
		if err := cluster.Register(ctx, cluster.RegisterConfig{Client: cli, Prefix: prefix, Secret: secret, Report: report, Logger: log}); err != nil {
			b.Fatal(err)
		}
	}
	a, err := apiserver.New(ctx, apiserver.Config{Etcd: cli, Prefix: prefix, Secret: secretRaw,
		DataDir: filepath.Join(dir, "api"), Logger: log, Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = a.Serve(l) }()
	defer func() { _ = a.Shutdown(context.Background()) }()
	testwait.For(b, 20*time.Second, "the simulated nodes registering", func() bool { return len(a.Watcher.Nodes()) >= nodes })
	if err := a.Engine.Refresh(ctx); err != nil {
		b.Fatal(err)
	}
	st := a.Projects.Store()
	tokQ, err := st.Create(ctx, "q", project.Quota{MaxSandboxes: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	tokN, err := st.Create(ctx, "n", project.Quota{})
	if err != nil {
		b.Fatal(err)
	}
	for _, tok := range []string{tokQ, tokN} {
		for _, ok := st.Identify(tok); !ok; _, ok = st.Identify(tok) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128, MaxIdleConns: 128}}
	url := "http://" + l.Addr().String() + "/v1/sandboxes"
	kinds := map[string]creator{"none": {url: url, token: tokN, hc: hc}, "quota": {url: url, token: tokQ, hc: hc}}
	var seq atomic.Int64
	run := func(c creator, n, parallel int) ([]time.Duration, time.Duration) {
		var mu sync.Mutex
		var lat []time.Duration
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range parallel {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(n) {
					t0 := time.Now()
					status, _, msg := c.create(ctx, fmt.Sprintf("bq-%d", seq.Add(1)))
					d := time.Since(t0)
					if status != http.StatusCreated {
						b.Errorf("create: %d %s", status, strings.TrimSpace(msg))
						return
					}
					mu.Lock()
					lat = append(lat, d)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return lat, time.Since(start)
	}
	var quotaCreates int64
	for _, cfg := range []struct{ n, parallel, rounds int }{{200, 1, 4}, {2000, 32, 4}} {
		quotaCreates += int64(cfg.n * cfg.rounds)
		lat := map[string][]time.Duration{}
		took := map[string]time.Duration{}
		for r := range cfg.rounds {
			order := []string{"none", "quota"}
			if r%2 == 1 {
				order = []string{"quota", "none"}
			}
			for _, k := range order {
				l, d := run(kinds[k], cfg.n, cfg.parallel)
				lat[k] = append(lat[k], l...)
				took[k] += d
			}
		}
		for _, k := range []string{"none", "quota"} {
			s := summarize(lat[k])
			rate := float64(len(lat[k])) / took[k].Seconds()
			b.Logf("parallel %d, %s: %d creates, p50 %.2f ms, p99 %.2f ms, %.0f creates/s",
				cfg.parallel, k, len(lat[k]), s.P50ms, s.P99ms, rate)
			b.ReportMetric(s.P50ms, fmt.Sprintf("p50_ms_%s_par%d", k, cfg.parallel))
			b.ReportMetric(rate, fmt.Sprintf("creates/s_%s_par%d", k, cfg.parallel))
		}
	}
	// Every quota create holds its reservation (nothing was deleted).
	if in, err := st.Get(ctx, "q"); err != nil || in.Usage.Sandboxes != quotaCreates {
		b.Errorf("project q's usage %+v (%v), want %d sandboxes", in.Usage, err, quotaCreates)
	}
}
