package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dsec-dev/dsec/internal/apiserver"
	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/noderpc"
	"github.com/dsec-dev/dsec/internal/placement"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// ClusterOptions configures `dsec bench cluster`.
type ClusterOptions struct {
	Nodes    int // simulated agents
	N        int // creates per phase
	Parallel int // creates in flight
}

// ClusterPhase is one run of N creates.
type ClusterPhase struct {
	Name     string `json:"name"`
	Capacity int    `json:"capacity"` // sandbox slots in the cluster
	Creates  int    `json:"creates"`
	Created  int    `json:"created"`
	// Exhausted answered 429 resource_exhausted, ExhaustedRetryAfter of them
	// with a Retry-After header; Failures is every other error.
	Exhausted           int     `json:"resource_exhausted"`
	ExhaustedRetryAfter int     `json:"resource_exhausted_with_retry_after"`
	Failures            int     `json:"failures"`
	FirstFailure        string  `json:"first_failure,omitempty"`
	Seconds             float64 `json:"seconds"`
	CreatesPerS         float64 `json:"creates_per_s"`
	P50ms               float64 `json:"p50_ms"`
	P99ms               float64 `json:"p99_ms"`
	MaxMs               float64 `json:"max_ms"`
	// SpreadMaxOverMean is the fullest node's sandboxes over the mean.
	SpreadMaxOverMean float64 `json:"spread_max_over_mean"`
}

// ClusterResult is the benchmark's answer: the headline figures are the full
// phase's (room for every create).
type ClusterResult struct {
	Nodes       int          `json:"simulated_nodes"`
	N           int          `json:"n"`
	Parallel    int          `json:"parallel"`
	CreatesPerS float64      `json:"creates_per_s"`
	P50ms       float64      `json:"p50_ms"`
	P99ms       float64      `json:"p99_ms"`
	Failures    int          `json:"failures"`
	Full        ClusterPhase `json:"room_for_all"`
	Half        ClusterPhase `json:"room_for_half"`
	Note        string       `json:"note"`
}

// simNode is a simulated agent: it only admits (up to max) and forgets.
type simNode struct {
	session.Service // nil: every other call panics (the benchmark makes none)
	name            string
	max             int64
	n               atomic.Int64
	byReq           sync.Map // request ID → sandbox ID
}

func (s *simNode) Info(context.Context) (api.Info, error) {
	return api.Info{Node: s.name, Backends: []string{api.BackendContainer}}, nil
}

func (s *simNode) Create(_ context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	if id, ok := s.byReq.Load(req.RequestID); ok && req.RequestID != "" {
		return api.Sandbox{ID: id.(string), RequestID: req.RequestID}, nil
	}
	if s.n.Add(1) > s.max {
		s.n.Add(-1)
		return api.Sandbox{}, errdefs.New(api.CodeResourceExhausted, "node %s is at its limit of %d sandboxes", s.name, s.max)
	}
	sb := api.Sandbox{ID: session.NewID(s.name), Backend: api.BackendContainer, State: api.StateRunning,
		RequestID: req.RequestID, CreatedAt: time.Now()}
	if req.RequestID != "" {
		s.byReq.Store(req.RequestID, sb.ID)
	}
	return sb, nil
}

// RunCluster runs the benchmark: an in-process etcd, Nodes simulated agents
// (each a real node RPC server on its own port, registered under a lease), one
// real API server over HTTP with auth, placement and request-ID claims; first
// with room for every create, then with room for half.
func RunCluster(ctx context.Context, o ClusterOptions) (ClusterResult, error) {
	if o.Nodes <= 0 || o.N <= 0 || o.Parallel <= 0 {
		return ClusterResult{}, errors.New("bench cluster: --simulated-nodes, --n and --parallel must be positive")
	}
	dir, err := os.MkdirTemp("", "dsec-bench-cluster-")
	if err != nil {
		return ClusterResult{}, err
	}
	defer os.RemoveAll(dir)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cli, stopEtcd, err := benchEtcd(ctx, dir, log)
	if err != nil {
		return ClusterResult{}, err
	}
	defer stopEtcd()
	res := ClusterResult{Nodes: o.Nodes, N: o.N, Parallel: o.Parallel,
		Note: "one in-process etcd; request IDs claimed in etcd per create; simulated agents admit only"}
	perNode := (o.N + o.Nodes - 1) / o.Nodes
	if res.Full, err = clusterPhase(ctx, cli, dir, "room_for_all", "/bench-full/", o, perNode*2, log); err != nil {
		return res, err
	}
	if res.Half, err = clusterPhase(ctx, cli, dir, "room_for_half", "/bench-half/", o, o.N/2/o.Nodes, log); err != nil {
		return res, err
	}
	res.CreatesPerS, res.P50ms, res.P99ms, res.Failures = res.Full.CreatesPerS, res.Full.P50ms, res.Full.P99ms, res.Full.Failures
	return res, nil
}

func benchEtcd(ctx context.Context, dir string, log *slog.Logger) (*clientv3.Client, func(), error) {
	port := func() (string, error) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		defer l.Close()
		return "http://" + l.Addr().String(), nil
	}
	cu, err := port()
	if err != nil {
		return nil, nil, err
	}
	pu, err := port()
	if err != nil {
		return nil, nil, err
	}
	ectx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() {
		done <- cluster.RunEtcd(ectx, cluster.EtcdConfig{Name: "bench", DataDir: filepath.Join(dir, "etcd"),
			ListenClient: cu, ListenPeer: pu, LogLevel: "panic", UnsafeNoFsync: os.Getenv("DSEC_BENCH_ETCD_NOFSYNC") == "1"}, log)
	}()
	stop := func() { cancel(); <-done }
	deadline := time.Now().Add(30 * time.Second)
	for {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		cli, err := cluster.Connect(cctx, cluster.ClientConfig{Endpoints: cu, Logger: zap.NewNop()})
		ccancel()
		if err == nil {
			return cli, func() { cli.Close(); stop() }, nil
		}
		select {
		case err := <-done:
			cancel()
			return nil, nil, fmt.Errorf("etcd: %w", err)
		default:
		}
		if time.Now().After(deadline) {
			stop()
			return nil, nil, fmt.Errorf("etcd did not start: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// clusterPhase starts o.Nodes simulated agents of perNode slots under prefix
// and one API server, and runs o.N creates through it.
func clusterPhase(ctx context.Context, cli *clientv3.Client, dir, name, prefix string, o ClusterOptions, perNode int, log *slog.Logger) (ClusterPhase, error) {
	ph := ClusterPhase{Name: name, Capacity: perNode * o.Nodes, Creates: o.N}
	secretRaw := []byte("bench-cluster-secret-" + name)
	secret, err := cluster.NewSecret(string(secretRaw))
	if err != nil {
		return ph, err
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nodes := make([]*simNode, o.Nodes)
	for i := range nodes {
		n := &simNode{name: fmt.Sprintf("sim%03d", i), max: int64(perNode)}
		nodes[i] = n
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return ph, err
		}
		path, h := noderpc.NewHandler(n, noderpc.HandlerOptions{Secret: secretRaw, Logger: log})
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
		if err := cluster.Register(pctx, cluster.RegisterConfig{Client: cli, Prefix: prefix, Secret: secret, Report: report, Logger: log}); err != nil {
			return ph, err
		}
	}
	a, err := apiserver.New(pctx, apiserver.Config{Etcd: cli, Prefix: prefix, Secret: secretRaw,
		DataDir: filepath.Join(dir, name), Logger: log, Name: "bench"})
	if err != nil {
		return ph, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return ph, err
	}
	go func() { _ = a.Serve(l) }()
	defer func() { _ = a.Shutdown(context.Background()) }()
	tok, err := os.ReadFile(a.TokenFile)
	if err != nil {
		return ph, err
	}
	// Wait until the engine sees every node.
	for deadline := time.Now().Add(20 * time.Second); len(a.Watcher.Nodes()) < o.Nodes; {
		if time.Now().After(deadline) {
			return ph, fmt.Errorf("only %d of %d simulated nodes registered", len(a.Watcher.Nodes()), o.Nodes)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := a.Engine.Refresh(ctx); err != nil {
		return ph, err
	}
	run := creator{url: "http://" + l.Addr().String() + "/v1/sandboxes", token: strings.TrimSpace(string(tok)),
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.Parallel * 2, MaxIdleConns: o.Parallel * 2}}}
	lat := make([]time.Duration, 0, o.N)
	var mu sync.Mutex
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < o.Parallel; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(o.N) || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				status, retryAfter, msg := run.create(ctx, fmt.Sprintf("bench-%s-%d", name, i))
				d := time.Since(t0)
				mu.Lock()
				switch {
				case status == http.StatusCreated:
					ph.Created++
					lat = append(lat, d)
				case status == http.StatusTooManyRequests:
					ph.Exhausted++
					if retryAfter != "" {
						ph.ExhaustedRetryAfter++
					}
				default:
					ph.Failures++
					if ph.FirstFailure == "" {
						ph.FirstFailure = fmt.Sprintf("%d %s", status, msg)
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	ph.Seconds = round(el.Seconds(), 3)
	ph.CreatesPerS = round(float64(ph.Created)/el.Seconds(), 1)
	lt := summarize(lat)
	ph.P50ms, ph.P99ms, ph.MaxMs = lt.P50ms, lt.P99ms, lt.Maxms
	var maxN, total int64
	for _, n := range nodes {
		c := n.n.Load()
		total += c
		maxN = max(maxN, c)
	}
	if total > 0 {
		ph.SpreadMaxOverMean = round(float64(maxN)/(float64(total)/float64(len(nodes))), 3)
	}
	return ph, nil
}

// creator posts creates with a bearer token and reads status and Retry-After.
type creator struct {
	url, token string
	hc         *http.Client
}

func (c creator) create(ctx context.Context, rid string) (int, string, string) {
	body, _ := json.Marshal(api.CreateSandboxRequest{RequestID: rid})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, "", err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	msg := ""
	if resp.StatusCode != http.StatusCreated {
		msg = string(b)
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), msg
}
