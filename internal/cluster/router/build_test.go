package router

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/cluster/noderpc"
	"github.com/dsec-dev/dsec/internal/cluster/noderpc/noderpctest"
	"github.com/dsec-dev/dsec/internal/cluster/placement"
	"github.com/dsec-dev/dsec/internal/errdefs"
	v1 "github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// builderNode is a node whose builds read the context, write a line naming
// the node, wait for release and answer; a context "fail" fails with an
// input error after its line.
type builderNode struct {
	session.Unimplemented
	name    string
	release chan struct{}
	mu      sync.Mutex
	builds  int
}

func (b *builderNode) BuildImage(ctx context.Context, req api.BuildImageRequest, r io.Reader) (api.BuildImageResult, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return api.BuildImageResult{}, err
	}
	b.mu.Lock()
	b.builds++
	b.mu.Unlock()
	_, _ = req.Output.Write([]byte("running on " + b.name + "\n"))
	if string(data) == "fail" {
		return api.BuildImageResult{}, errdefs.Invalid("Dockerfile line 2: RUN false: exited with code 1")
	}
	select {
	case <-b.release:
	case <-ctx.Done():
		return api.BuildImageResult{}, ctx.Err()
	}
	return api.BuildImageResult{Image: api.Image{Name: req.Name, Kind: "layered"}, Steps: []api.BuildStep{}}, nil
}

func (b *builderNode) PruneBuildCache(context.Context) (api.BuildCachePruned, error) {
	return api.BuildCachePruned{Entries: 2, Bytes: 100, Kept: 1}, nil
}

// TestBuildThroughRouter: /v1 of an API server places a build on a node that
// serves containers (never on one that does not), streams its output while
// it runs, keeps a failure's code, and sums the nodes' build cache prunes.
func TestBuildThroughRouter(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	view := &fakeView{nodes: map[string]cluster.NodeStatus{}}
	release := make(chan struct{})
	nodes := map[string]*builderNode{}
	for _, n := range []struct {
		name     string
		backends []string
	}{{"b1", []string{api.BackendContainer}}, {"fc", []string{api.BackendFnCall}}} {
		bn := &builderNode{name: n.name, release: release}
		nodes[n.name] = bn
		url, _ := noderpctest.Serve(t, bn, noderpc.HandlerOptions{Secret: secret})
		view.nodes[n.name] = cluster.NodeStatus{State: placement.StateReady, NodeRecord: cluster.NodeRecord{Name: n.name, Addr: url,
			Backends: n.backends, Capacity: placement.Resources{Sandboxes: 100}}}
	}
	eng := placement.New(view, placement.Config{Seed: 1})
	if err := eng.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	rt := New(Config{Nodes: view, Engine: eng, Dial: func(n cluster.NodeStatus) session.Service {
		return noderpc.NewClient(n.Addr, noderpc.ClientOptions{Secret: secret})
	}})
	t.Cleanup(func() { rt.Close() })
	hs := httptest.NewServer(v1.New(Cluster{Router: rt, Envs: &Images{Router: rt}}, v1.Options{Token: "t"}).Handler())
	t.Cleanup(hs.Close)
	cl := client.New(hs.URL, "t", client.WithRetry(0))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := cl.BuildImage(ctx, api.BuildImageRequest{Name: "img", Output: pw}, strings.NewReader("ctx"))
		pw.CloseWithError(err)
		done <- err
	}()
	line := make([]byte, len("running on b1\n"))
	if _, err := io.ReadFull(pr, line); err != nil || string(line) != "running on b1\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	select {
	case err := <-done:
		t.Fatalf("the build answered before its release: %v", err)
	default:
	}
	close(release)
	go io.Copy(io.Discard, pr)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	var out strings.Builder
	_, err := cl.BuildImage(ctx, api.BuildImageRequest{Name: "img", Output: &out}, strings.NewReader("fail"))
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeInvalidArgument || !strings.Contains(ae.Message, "Dockerfile line 2") {
		t.Errorf("failing build: %v, want invalid_argument naming the line", err)
	}
	if out.String() != "running on b1\n" {
		t.Errorf("failing build's output %q", out.String())
	}
	if n := nodes["fc"].builds; n != 0 {
		t.Errorf("%d builds on the node without containers", n)
	}

	sum, err := Cluster{Router: rt, Envs: &Images{Router: rt}}.PruneBuildCache(ctx)
	if err != nil || sum != (api.BuildCachePruned{Entries: 4, Bytes: 200, Kept: 2}) {
		t.Errorf("prune: %+v %v, want the two nodes' sum", sum, err)
	}
}
