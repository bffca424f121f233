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
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dsec-dev/dsec/internal/apiserver"
	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/cluster/noderpc"
	"github.com/dsec-dev/dsec/internal/cluster/placement"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// ClusterOptions configures `dsec bench cluster`.
type ClusterOptions struct {
	Nodes    int // simulated agents
	N        int // creates per phase
	Parallel int // creates in flight
	// Batch, when positive, adds a phase that makes the same N sandboxes
	// through POST /v1/sandboxes:batch, Batch per request, BatchParallel
	// requests in flight.
	Batch         int
	BatchParallel int
	// CPUProfile, when set, writes a CPU profile of the whole run there; its
	// samples carry the label role=apiserver, node, client or etcd
	// (go tool pprof -tagfocus role=apiserver) and, but for etcd's, the
	// phase's name (phase=room_for_all).
	CPUProfile string
	// MemProfile, when set, writes the run's allocation profile there at the
	// end (go tool pprof -sample_index=alloc_space).
	MemProfile string
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
	// Batch is the sandboxes per request (0: one create per request); then
	// the latencies are per batch request.
	Batch int `json:"batch,omitempty"`
	// CPUmsPerCreate is the CPU time (user+system) the whole process spent per
	// create of the phase: client, API server, simulated nodes and etcd
	// together. It varies far less with the machine's load than the rate.
	CPUmsPerCreate float64 `json:"cpu_ms_per_create"`
	// SpreadMaxOverMean is the fullest node's sandboxes over the mean.
	SpreadMaxOverMean float64 `json:"spread_max_over_mean"`
}

// ClusterResult is the benchmark's answer: the headline figures are the full
// phase's (room for every create).
type ClusterResult struct {
	Nodes       int     `json:"simulated_nodes"`
	N           int     `json:"n"`
	Parallel    int     `json:"parallel"`
	CreatesPerS float64 `json:"creates_per_s"`
	P50ms       float64 `json:"p50_ms"`
	P99ms       float64 `json:"p99_ms"`
	Failures    int     `json:"failures"`
	// CPUmsPerCreate is the full phase's (ClusterPhase.CPUmsPerCreate).
	CPUmsPerCreate float64       `json:"cpu_ms_per_create"`
	Full           ClusterPhase  `json:"room_for_all"`
	Half           ClusterPhase  `json:"room_for_half"`
	BatchPhase     *ClusterPhase `json:"batch,omitempty"`
	// LoadAvg is /proc/loadavg's 1-minute figure at the start and the end.
	LoadAvg [2]float64 `json:"load_avg"`
	Note    string     `json:"note"`
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
	if o.CPUProfile != "" {
		f, err := os.Create(o.CPUProfile)
		if err != nil {
			return ClusterResult{}, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return ClusterResult{}, err
		}
		defer pprof.StopCPUProfile()
	}
	if o.MemProfile != "" {
		defer func() {
			if f, err := os.Create(o.MemProfile); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cli, stopEtcd, err := benchEtcd(ctx, dir, log)
	if err != nil {
		return ClusterResult{}, err
	}
	defer stopEtcd()
	res := ClusterResult{Nodes: o.Nodes, N: o.N, Parallel: o.Parallel, Note: clusterNote}
	res.LoadAvg[0] = loadAvg()
	perNode := (o.N + o.Nodes - 1) / o.Nodes
	if res.Full, err = clusterPhase(ctx, cli, dir, "room_for_all", "/bench-full/", o, perNode*2, 0, log); err != nil {
		return res, err
	}
	if res.Half, err = clusterPhase(ctx, cli, dir, "room_for_half", "/bench-half/", o, o.N/2/o.Nodes, 0, log); err != nil {
		return res, err
	}
	if o.Batch > 0 {
		bo := o
		bo.Parallel = max(1, o.BatchParallel)
		ph, err := clusterPhase(ctx, cli, dir, "batch", "/bench-batch/", bo, perNode*2, o.Batch, log)
		if err != nil {
			return res, err
		}
		res.BatchPhase = &ph
	}
	res.LoadAvg[1] = loadAvg()
	res.CreatesPerS, res.P50ms, res.P99ms, res.Failures = res.Full.CreatesPerS, res.Full.P50ms, res.Full.P99ms, res.Full.Failures
	res.CPUmsPerCreate = res.Full.CPUmsPerCreate
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
	go labeled("etcd", "", func() {
		done <- cluster.RunEtcd(ectx, cluster.EtcdConfig{Name: "bench", DataDir: filepath.Join(dir, "etcd"),
			ListenClient: cu, ListenPeer: pu, LogLevel: "panic", UnsafeNoFsync: os.Getenv("DSEC_BENCH_ETCD_NOFSYNC") == "1"}, log)
	})
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

// clusterNote says what each side of the benchmark does.
const clusterNote = "All in one process, on loopback. Client: `parallel` goroutines (batch phase: --batch-parallel), each " +
	"POSTing one JSON create (request_id set, as the SDK does) per request over keep-alive HTTP/1.1 with the bearer token, " +
	"reading the whole answer; the batch phase POSTs /v1/sandboxes:batch with `batch` creates per request. " +
	"API server: the real one (apiserver.New, the same handler chain as `dsec apiserver`: request ID, metrics, auth, " +
	"JSON decode and validation, power-of-k placement over the etcd watcher's snapshot, request-ID claim committed in " +
	"etcd before the node is called (claims made at the same time share a transaction), a node RPC to the chosen node, " +
	"JSON answer). Nodes: N simulated agents, each a real node RPC server (cluster-secret check; unary calls as plain JSON POSTs over keep-alive HTTP/1.1, as between `dsec apiserver` and `dsec agent`) on its " +
	"own port, registered under an etcd lease; Create only counts against its limit (admission) and remembers the " +
	"request ID; nothing is started. etcd: one embedded member with fsync (DSEC_BENCH_ETCD_NOFSYNC=1 turns it off). " +
	"cpu_ms_per_create is the process's user+system CPU for the phase over its creates (all four parts together)."

// loadAvg is the 1-minute load average (0 when unknown).
func loadAvg() float64 { return loadAvg3()[0] }

// cpuTime is the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clusterPhase starts o.Nodes simulated agents of perNode slots under prefix
// and one API server, and runs o.N creates through it: one per request, or
// batch per POST /v1/sandboxes:batch when batch > 0.
func clusterPhase(ctx context.Context, cli *clientv3.Client, dir, name, prefix string, o ClusterOptions, perNode, batch int, log *slog.Logger) (ClusterPhase, error) {
	ph := ClusterPhase{Name: name, Capacity: perNode * o.Nodes, Creates: o.N, Batch: batch}
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
		go labeled("node", name, func() { _ = srv.Serve(l) })
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
	go labeled("apiserver", name, func() { _ = a.Serve(l) })
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
	step := int64(max(1, batch))
	cpu0 := cpuTime()
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < o.Parallel; w++ {
		wg.Add(1)
		go labeled("client", name, func() {
			defer wg.Done()
			for {
				i := next.Add(step) - step
				if i >= int64(o.N) || ctx.Err() != nil {
					return
				}
				n := int(min(step, int64(o.N)-i))
				t0 := time.Now()
				var status int
				var retryAfter, msg string
				if batch > 0 {
					status, retryAfter, msg = run.createBatch(ctx, fmt.Sprintf("bench-%s-%d", name, i), n)
				} else {
					status, retryAfter, msg = run.create(ctx, fmt.Sprintf("bench-%s-%d", name, i))
				}
				d := time.Since(t0)
				mu.Lock()
				switch {
				case status == http.StatusCreated:
					ph.Created += n
					lat = append(lat, d)
				case status == http.StatusTooManyRequests:
					ph.Exhausted += n
					if retryAfter != "" {
						ph.ExhaustedRetryAfter += n
					}
				default:
					ph.Failures += n
					if ph.FirstFailure == "" {
						ph.FirstFailure = fmt.Sprintf("%d %s", status, msg)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	ph.CPUmsPerCreate = round(float64(cpuTime()-cpu0)/float64(time.Millisecond)/float64(o.N), 4)
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

// labeled runs f with the profiler labels role and phase (goroutines f starts
// inherit them; phase "" for etcd, which serves every phase), so a CPU profile
// of the run tells the API server from the client and nodes, and one phase
// from another (go tool pprof -tagfocus phase=room_for_all).
func labeled(role, phase string, f func()) {
	l := pprof.Labels("role", role)
	if phase != "" {
		l = pprof.Labels("role", role, "phase", phase)
	}
	pprof.Do(context.Background(), l, func(context.Context) { f() })
}

// creator posts creates with a bearer token and reads status and Retry-After.
type creator struct {
	url, token string
	hc         *http.Client
}

func (c creator) create(ctx context.Context, rid string) (int, string, string) {
	body, _ := json.Marshal(api.CreateSandboxRequest{RequestID: rid})
	return c.post(ctx, c.url, body)
}

// createBatch posts n creates (request IDs rid-0 ... rid-(n-1)) as one batch.
func (c creator) createBatch(ctx context.Context, rid string, n int) (int, string, string) {
	req := api.BatchCreateRequest{Sandboxes: make([]api.CreateSandboxRequest, n)}
	for i := range req.Sandboxes {
		req.Sandboxes[i].RequestID = fmt.Sprintf("%s-%d", rid, i)
	}
	body, _ := json.Marshal(req)
	return c.post(ctx, c.url+":batch", body)
}

func (c creator) post(ctx context.Context, url string, body []byte) (int, string, string) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, "", err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	msg := ""
	if resp.StatusCode != http.StatusCreated {
		msg = string(b)
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), msg
}
