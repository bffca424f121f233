package deptest

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// serverSide matches the packages the client binary (cmd/dsec) must not link:
// the roles and their assembly, the session service's implementations, the
// drivers, the stores (cluster state in etcd, blobs, layers, environments, the
// trajectory log), image conversion, the front ends, the metrics and tracing
// stacks and the benchmark tooling; and the third-party modules behind them
// (etcd's server, raft and client, bbolt, pebble, minio, go-containerregistry,
// EROFS, netlink, nftables, eBPF, Prometheus, OpenTelemetry), with protobuf,
// Connect and gRPC, whose registries cost every start-up milliseconds. These
// are what dsecd runs; dsec reaches them only by exec'ing dsecd.
var serverSide = Under(
	mod+"internal/agent", mod+"internal/app", mod+"internal/apiserver", mod+"internal/session",
	mod+"internal/backend/driver", mod+"internal/backend/container", mod+"internal/backend/vm", mod+"internal/backend/fncall",
	mod+"internal/backend/initbin", mod+"internal/cgroups", mod+"internal/seccomp", mod+"internal/netpolicy",
	mod+"internal/reclaim", mod+"internal/image/commit", mod+"internal/fsops",
	mod+"internal/cluster", mod+"internal/cluster/noderpc", mod+"internal/cluster/placement", mod+"internal/project",
	mod+"internal/image/blob", mod+"internal/image/lazy", mod+"internal/image/layer", mod+"internal/image/envstore",
	mod+"internal/image", mod+"internal/trajectory", mod+"internal/frontend", mod+"ui",
	mod+"internal/metrics", mod+"internal/tracing", mod+"internal/httpkit",
	mod+"internal/bench", mod+"internal/bench/peer", mod+"internal/escapeprobe", mod+"internal/testprog",
	"go.etcd.io", "github.com/cockroachdb", "github.com/minio", "github.com/google/go-containerregistry",
	"github.com/erofs", "github.com/vishvananda", "github.com/mdlayher", "github.com/google/nftables",
	"github.com/cilium/ebpf", "github.com/prometheus", "go.opentelemetry.io", "go.uber.org/zap",
	"github.com/johannesboyne/gofakes3", "google.golang.org/protobuf", "google.golang.org/grpc", "connectrpc.com",
)

// TestClientLinksNoServerCode: `dsec ls` and `dsec exec` start in a few
// milliseconds because the client links the API client and nothing a server
// runs (no package initialisation of etcd, raft, protobuf registries or blob
// stores). A server-side package in `go list -deps ./cmd/dsec` fails here with
// the import chain that brought it in.
func TestClientLinksNoServerCode(t *testing.T) {
	g, err := Load("../..", "./cmd/dsec")
	if err != nil {
		t.Fatal(err)
	}
	client := mod + "cmd/dsec"
	if _, ok := g[client]; !ok {
		t.Fatalf("go list -deps ./cmd/dsec: no %s", client)
	}
	for _, bad := range ClientViolations(g, client, serverSide) {
		t.Errorf("the client links server-side %s (run it in dsecd); import chain:\n\t%s",
			bad[len(bad)-1], strings.Join(bad, "\n\t→ "))
	}
}

// TestClientViolationsFinds: the check reports each place the graph enters
// the forbidden set once, with its chain, and nothing for a clean graph.
func TestClientViolationsFinds(t *testing.T) {
	g := Graph{
		"cmd": {"api", "client", "x/raft"}, "client": {"api", "x/server"}, "api": nil,
		"x/server": {"x/raft", "x/store"}, "x/raft": nil, "x/store": nil,
	}
	got := ClientViolations(g, "cmd", Under("x"))
	if len(got) != 2 || strings.Join(got[0], " ") != "cmd x/raft" ||
		strings.Join(got[1], " ") != "cmd client x/server" {
		t.Fatalf("violations %v", got)
	}
	if v := ClientViolations(Graph{"cmd": {"api"}, "api": nil}, "cmd", Under("x")); v != nil {
		t.Fatalf("a clean graph: %v", v)
	}
}

// TestClientBuildIsStatic: `make build` links the client without cgo, so
// every `dsec` command starts without the dynamic loader. The test builds
// ./cmd/dsec with the Makefile's own recipe (`make -n build`) and fails on an
// ELF that names an interpreter or a shared library.
func TestClientBuildIsStatic(t *testing.T) {
	out, err := exec.Command("make", "-C", "../..", "-n", "build").Output()
	if err != nil {
		t.Fatalf("make -n build: %v", err)
	}
	var recipe string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasSuffix(strings.TrimSpace(line), "-o bin/dsec ./cmd/dsec") {
			recipe = line
		}
	}
	if recipe == "" {
		t.Fatalf("make -n build has no line building bin/dsec from ./cmd/dsec:\n%s", out)
	}
	bin := filepath.Join(t.TempDir(), "dsec")
	cmd := exec.Command("sh", "-c", strings.Replace(recipe, "-o bin/dsec", "-o "+bin, 1))
	cmd.Dir = "../.."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", recipe, err, b)
	}
	if err := StaticELF(bin); err != nil {
		t.Fatalf("the client as `make build` links it (%s): %v", strings.TrimSpace(recipe), err)
	}
}
