package trajtest

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/backend/driver/mock"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/trajectory"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Node is the session service the suite runs over without root: a node agent
// over the mock driver (agenttest), below agenttest.Faults (which counts the
// operations that ran and fails one on demand) and an FnCall engine that
// accepts every call (see FnCall). Its backend is named "container" and its
// default image "default", the names the trajectory fixtures recorded; the
// image's PATH starts with a host directory that has an `exit N` program, as
// the fixtures' steps ran `exit 3` as a command. Its processes are the test
// user's host processes (no isolation): `echo`, `cat` and `sh` are the host's.
type Node struct {
	session.Service
	Faults *agenttest.Faults
	// Host is the mock driver's host (ExitInit makes a sandbox's init exit).
	Host *mock.Host
}

// NewNode starts a Node; it deletes its sandboxes and stops when the test ends.
func NewNode(t testing.TB) *Node {
	t.Helper()
	n := &Node{Faults: &agenttest.Faults{}, Host: mock.NewHost()}
	drv := agenttest.MockWith(t, mock.Config{Host: n.Host, BackendName: api.BackendContainer})
	images := defaultImage(t)
	m := agenttest.New(t, agenttest.Options{Driver: drv, Config: func(c *agent.Config) { c.Images = images }})
	n.Service = session.Chain(m, n.Faults.Interceptor(), agenttest.FnCalls(FnCall))
	return n
}

// FnCall is the Node's FnCall engine: it accepts every call, and each test's
// stdout is its stdin.
func FnCall(_ context.Context, req api.FnCallRequest) (api.FnCallResult, error) {
	res := api.FnCallResult{Verdict: api.VerdictAccepted, Tests: []api.FnCallTestResult{}}
	for _, t := range req.Tests {
		res.Tests = append(res.Tests, api.FnCallTestResult{Verdict: api.VerdictAccepted, Stdout: t.Stdin})
	}
	return res, nil
}

// defaultImage is an image store whose default image, "default", has an
// /etc/passwd (all the agent reads) and a PATH that finds `exit`.
func defaultImage(t testing.TB) *image.Store {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	rootfs := filepath.Join(dir, "default", "rootfs")
	for _, d := range []string{bin, filepath.Join(rootfs, "etc")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		filepath.Join(bin, "exit"):                  "#!/bin/sh\nexit \"${1:-0}\"\n",
		filepath.Join(rootfs, "etc", "passwd"):      "root:x:0:0:root:/root:/bin/sh\n",
		filepath.Join(dir, "default", "image.json"): `{"name":"default","lower":["rootfs"],"config":{"env":["PATH=` + bin + `:/usr/local/bin:/usr/bin:/bin"]}}`,
	}
	for p, content := range files {
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return &image.Store{Dir: dir, Default: "default"}
}

// NodeHarness runs the suite on a Node per test with the given stores.
func NodeHarness(store func(t *testing.T) trajectory.Store, restart func(t *testing.T, s trajectory.Store) trajectory.Store) Harness {
	return Harness{
		Service: func(t *testing.T) session.Service { return NewNode(t) },
		FnCall:  true,
		Store:   store,
		Restart: restart,
		Runs:    func(svc session.Service) int { return svc.(*Node).Faults.Runs() },
		Fail:    func(svc session.Service, method string, err error) { svc.(*Node).Faults.FailNext(method, 1, err) },
		Kill: func(t *testing.T, svc session.Service, id string) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := svc.(*Node).Host.ExitInit(ctx, id); err != nil {
				t.Fatal(err)
			}
		},
		Serve: func(t *testing.T, _ session.Service, _ string, h http.Handler) int {
			// The mock's sandboxes dial the host's loopback.
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: h}
			go func() { _ = srv.Serve(l) }()
			t.Cleanup(func() { srv.Close() })
			return l.Addr().(*net.TCPAddr).Port
		},
	}
}
