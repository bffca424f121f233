package build_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image/build"
	"github.com/dsec-dev/dsec/internal/netpolicy/netpolicytest"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// TestBuildRunNetwork: a RUN that fetches from a test host (a network
// namespace of the test's own, on a veth) fails by default, with an error
// naming the line and saying the build had no network; built through
// POST /v1/images:build with a network policy allowing that host and port,
// the same Dockerfile succeeds and the image has what the RUN fetched.
func TestBuildRunNetwork(t *testing.T) {
	d := startNode(t)
	ctx := context.Background()
	h := netpolicytest.NewHost(t, "dsbn", 71)
	addr := h.Listen(t, 0)
	host, port, _ := net.SplitHostPort(addr)
	dir := t.TempDir()
	dockerfile := fmt.Sprintf("FROM debian\nRUN timeout 5 bash -c 'exec 3<>/dev/tcp/%s/%s && cat <&3' > /greeting.txt\n", host, port)
	writeFiles(t, dir, map[string]string{"Dockerfile": dockerfile})

	_, err := buildIn(t, d, "net-none", dir, dockerfile, nil)
	if errdefs.CodeOf(err) != api.CodeInvalidArgument {
		t.Fatalf("RUN reaching a host without --network: %v", err)
	}
	for _, w := range []string{"line 2", "exited with code", "have no network"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}

	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	cl := client.New(srv.URL, "test")
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(build.WriteContext(pw, dir, nil)) }()
	netp, err := api.ParseNetworkPolicy(addr)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cl.BuildImage(ctx, api.BuildImageRequest{Name: "net-allowed", Network: netp}, pr)
	if err != nil {
		t.Fatalf("build with --network %s: %v", addr, err)
	}
	if res.CacheHits != 0 {
		t.Fatalf("the RUN came from the cache: %+v", res.Steps)
	}
	sb, err := cl.Create(ctx, api.CreateSandboxRequest{Image: "net-allowed"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Delete(ctx, sb.ID)
	if got := exec(t, d, sb.ID, "cat /greeting.txt"); got != "hello from "+addr {
		t.Fatalf("the RUN fetched %q", got)
	}
	// The image has no network of its own: a sandbox of it reaches nothing.
	if r, err := d.Manager.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"timeout", "5", "bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%s", host, port)}, TimeoutMs: 20000}); err != nil || r.ExitCode == 0 {
		t.Fatalf("a sandbox of the built image reached the host: %+v %v", r, err)
	}
}
