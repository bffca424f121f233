package noderpc_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/backend/container"
	"github.com/dsec-dev/dsec/internal/cgroups"
	"github.com/dsec-dev/dsec/internal/cluster/noderpc"
	"github.com/dsec-dev/dsec/internal/cluster/noderpc/noderpctest"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

var secret = []byte("test-cluster-secret-0123456789")

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func wantCode(t testing.TB, what string, err error, code api.Code) {
	t.Helper()
	if !errdefs.Is(err, code) {
		t.Errorf("%s: error %v (code %s), want %s", what, err, errdefs.CodeOf(err), code)
	}
}

// node is a Node RPC server on 127.0.0.1 serving one service.
type node struct {
	url string
	srv *http.Server
}

// serve starts a Node RPC server for svc; it stops when the test ends.
func serve(t testing.TB, svc session.Service, opts noderpc.HandlerOptions) *node {
	t.Helper()
	if opts.Secret == nil {
		opts.Secret = secret
	}
	url, srv := noderpctest.Serve(t, svc, opts)
	return &node{url: url, srv: srv}
}

// client returns a client of n with the test secret; closed when the test ends.
func (n *node) client(t testing.TB, mod func(*noderpc.ClientOptions)) *noderpc.Client {
	opts := noderpc.ClientOptions{Secret: secret}
	if mod != nil {
		mod(&opts)
	}
	c := noderpc.NewClient(n.url, opts)
	t.Cleanup(func() { c.Close() })
	return c
}

// mockAgent is a node agent on the mock driver (no root, no images).
func mockAgent(t testing.TB) *agent.Manager { return agenttest.New(t, agenttest.Options{}) }

func imagesDir() string {
	if d := os.Getenv("DSEC_IMAGES_DIR"); d != "" {
		return d
	}
	return "/var/lib/dsec/images"
}

// containerAgent is a node agent over the real container driver (root, the
// default image). When the test ends it deletes every sandbox, closes the agent
// and checks that no cgroup was left behind.
func containerAgent(t testing.TB) *agent.Manager {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (namespaces, cgroups, mounts)")
	}
	store := &image.Store{Dir: imagesDir(), Default: "debian"}
	if _, err := store.Resolve(""); err != nil {
		t.Skipf("default image not available (run `make setup`): %v", err)
	}
	state, err := os.MkdirTemp("/var/lib", "dsec-nrpc-")
	if err != nil {
		t.Fatal(err)
	}
	run, err := os.MkdirTemp("/run", "dsec-nrpc-")
	if err != nil {
		os.RemoveAll(state)
		t.Fatal(err)
	}
	parent := "dsec-test-" + strings.TrimPrefix(filepath.Base(state), "dsec-nrpc-")
	drv, err := container.New(container.Config{StateDir: state, RunDir: run, CgroupParent: parent})
	if err != nil {
		t.Fatalf("container.New: %v", err)
	}
	m, err := agent.New(ctxT(t), agent.Config{DataDir: t.TempDir(), Driver: drv, Images: store, Node: "rpc-node"})
	if err != nil {
		drv.Close()
		t.Fatalf("agent.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := m.DeleteAll(ctx); err != nil {
			t.Errorf("DeleteAll: %v", err)
		}
		m.Close()
		drv.Close()
		ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if h, err := cgroups.Detect("/sys/fs/cgroup"); err == nil {
			names, _ := h.List(parent)
			if len(names) > 0 {
				t.Errorf("cgroups left behind: %v", names)
			}
			// Remove them anyway (a destroy that timed out leaves its
			// sandbox's cgroups until its init has exited).
			for _, n := range names {
				if g, err := h.Open(n); err == nil {
					if err := g.Delete(ctx); err != nil {
						t.Errorf("remove %s: %v", n, err)
					}
				}
			}
			if g, err := h.Open(parent); err == nil {
				if err := g.Delete(ctx); err != nil {
					t.Errorf("remove test cgroup parent: %v", err)
				}
			}
		}
		os.RemoveAll(state)
		os.RemoveAll(run)
	})
	return m
}

func noderpcOpts() noderpc.HandlerOptions { return noderpc.HandlerOptions{} }
