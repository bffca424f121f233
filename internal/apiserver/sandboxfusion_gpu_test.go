package apiserver_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/apiserver"
	"github.com/dsec-dev/dsec/internal/app/apptest"
	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/cluster/noderpc"
	"github.com/dsec-dev/dsec/internal/cluster/placement"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// fnCallNode is a fake node that serves FnCall: every test's stdout names
// the node, so the caller sees where the call ran.
type fnCallNode struct {
	session.Unimplemented
	name string
}

func (n fnCallNode) FnCall(_ context.Context, req api.FnCallRequest) (api.FnCallResult, error) {
	res := api.FnCallResult{Verdict: api.VerdictAccepted}
	for range req.Tests {
		res.Tests = append(res.Tests, api.FnCallTestResult{Verdict: api.VerdictAccepted, Stdout: n.name})
	}
	return res, nil
}

// fakeCluster is an embedded etcd and an API server in front of fake nodes
// (node RPC servers registered in etcd as agents register).
type fakeCluster struct {
	ctx    context.Context
	etcd   *clientv3.Client
	raw    []byte
	secret cluster.Secret
	url    string
	token  string
}

func newFakeCluster(t *testing.T, name string) *fakeCluster {
	t.Helper()
	_, etcd := apptest.Etcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	c := &fakeCluster{ctx: ctx, etcd: etcd, raw: []byte(strings.Repeat(name[:1], 40))}
	var err error
	if c.secret, err = cluster.NewSecret(string(c.raw)); err != nil {
		t.Fatal(err)
	}
	a, err := apiserver.New(ctx, apiserver.Config{Etcd: etcd, Secret: c.raw, DataDir: t.TempDir(), Name: name, Logger: quiet(),
		QuotaReconcile: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
	tok, err := os.ReadFile(a.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	c.url, c.token = srv.URL, strings.TrimSpace(string(tok))
	return c
}

// node serves svc's node RPC as node name and registers it with the
// backends and hardware.
func (c *fakeCluster) node(t *testing.T, svc session.Service, name string, backends, hardware []string) {
	t.Helper()
	path, h := noderpc.NewHandler(svc, noderpc.HandlerOptions{Secret: c.raw, Logger: quiet()})
	mux := http.NewServeMux()
	mux.Handle(path, h)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := noderpc.NewServer(mux, noderpc.ServerOptions{Logger: quiet()})
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := "http://" + l.Addr().String()
	report := func(context.Context) (cluster.NodeRecord, error) {
		return cluster.NodeRecord{Name: name, Addr: addr, Backends: backends, Hardware: hardware,
			Capacity: placement.Resources{Sandboxes: 10}, FnCallCapacity: 4}, nil
	}
	if err := cluster.Register(c.ctx, cluster.RegisterConfig{Client: c.etcd, Secret: c.secret, Report: report, Logger: quiet()}); err != nil {
		t.Fatal(err)
	}
}

// post sends a SandboxFusion request with the cluster's token.
func (c *fakeCluster) post(t *testing.T, path, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", c.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s: answer is not JSON: %v", path, err)
	}
	return resp.StatusCode, out
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestSandboxFusionGPUThroughAPIServer: through an API server, SandboxFusion's
// python_gpu and cuda are answered a 200 SandboxError naming the language
// while no node advertises a GPU (a CPU language still runs), and once a
// node advertising one registers they all run there, never on the CPU node.
func TestSandboxFusionGPUThroughAPIServer(t *testing.T) {
	c := newFakeCluster(t, "gpu")
	fnCall := []string{api.BackendFnCall}
	c.node(t, fnCallNode{name: "cpu1"}, "cpu1", fnCall, nil)
	runCode := func(lang string) (int, map[string]any) {
		t.Helper()
		return c.post(t, "/run_code", `{"code":"x","language":"`+lang+`","run_timeout":5}`)
	}
	ranOn := func(out map[string]any) string {
		run, _ := out["run_result"].(map[string]any)
		s, _ := run["stdout"].(string)
		return s
	}

	// Only the CPU node: a CPU language runs there; the GPU ones are refused.
	if !testwait.Until(20*time.Second, func() bool {
		_, out := runCode("python")
		return ranOn(out) == "cpu1"
	}) {
		t.Fatal("python never ran on the CPU node")
	}
	for _, lang := range []string{"python_gpu", "cuda"} {
		code, out := runCode(lang)
		msg, _ := out["message"].(string)
		if code != 200 || out["status"] != "SandboxError" || !strings.Contains(msg, lang) || !strings.Contains(msg, "GPU") {
			t.Errorf("%s with no GPU node: %d %v; want 200 SandboxError naming %s and the GPU", lang, code, out, lang)
		}
	}

	// A node advertising a GPU joins: GPU calls go there, and only there.
	c.node(t, fnCallNode{name: "gpu1"}, "gpu1", fnCall, []string{"gpu"})
	if !testwait.Until(20*time.Second, func() bool {
		_, out := runCode("python_gpu")
		return ranOn(out) == "gpu1"
	}) {
		t.Fatal("python_gpu never ran on the GPU node")
	}
	for range 10 {
		for _, lang := range []string{"python_gpu", "cuda"} {
			if code, out := runCode(lang); code != 200 || out["status"] != "Success" || ranOn(out) != "gpu1" {
				t.Fatalf("%s with a GPU node: %d %v, want Success on gpu1", lang, code, out)
			}
		}
	}
}
