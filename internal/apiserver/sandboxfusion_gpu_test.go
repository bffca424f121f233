package apiserver_test

import (
	"bytes"
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

// startFakeNode serves n as a node of the fncall backend with the hardware.
func startFakeNode(ctx context.Context, t *testing.T, secret cluster.Secret, raw []byte, etcd *clientv3.Client, n fnCallNode, hardware []string) {
	t.Helper()
	serveFakeNode(ctx, t, secret, raw, etcd, n, n.name, []string{api.BackendFnCall}, hardware)
}

// serveFakeNode serves svc's node RPC as node name and registers it in etcd
// with the backends and hardware.
func serveFakeNode(ctx context.Context, t *testing.T, secret cluster.Secret, raw []byte, etcd *clientv3.Client, svc session.Service,
	name string, backends, hardware []string) {
	t.Helper()
	path, h := noderpc.NewHandler(svc, noderpc.HandlerOptions{Secret: raw, Logger: quiet()})
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
	if err := cluster.Register(ctx, cluster.RegisterConfig{Client: etcd, Secret: secret, Report: report, Logger: quiet()}); err != nil {
		t.Fatal(err)
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestSandboxFusionGPUThroughAPIServer: through an API server, SandboxFusion's
// python_gpu and cuda are answered a 200 SandboxError naming the language
// while no node advertises a GPU (a CPU language still runs), and once a
// node advertising one registers they all run there, never on the CPU node.
func TestSandboxFusionGPUThroughAPIServer(t *testing.T) {
	_, etcd := apptest.Etcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	raw := []byte(strings.Repeat("g", 40))
	secret, err := cluster.NewSecret(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	startFakeNode(ctx, t, secret, raw, etcd, fnCallNode{name: "cpu1"}, nil)
	a, err := apiserver.New(ctx, apiserver.Config{Etcd: etcd, Secret: raw, DataDir: t.TempDir(), Name: "gpu", Logger: quiet(),
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
	defer srv.Close()
	runCode := func(lang string) (int, map[string]any) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"code": "x", "language": lang, "run_timeout": 5})
		req, _ := http.NewRequest("POST", srv.URL+"/run_code", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatalf("%s: answer is not JSON: %v", lang, err)
		}
		return resp.StatusCode, out
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
	startFakeNode(ctx, t, secret, raw, etcd, fnCallNode{name: "gpu1"}, []string{"gpu"})
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
