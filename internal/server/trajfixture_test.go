package server_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/server"
	"github.com/dsec-dev/dsec/internal/server/servertest"
	"github.com/dsec-dev/dsec/internal/trajectory"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestWriteLegacyTrajFixture writes the trajectory-log fixture of the raw /v1
// answer format (DSEC_WRITE_TRAJ_FIXTURE=DIR): one trajectory per store kind with a
// step of every op, for the compatibility test in internal/trajectory.
func TestWriteLegacyTrajFixture(t *testing.T) {
	dir := os.Getenv("DSEC_WRITE_TRAJ_FIXTURE")
	if dir == "" {
		t.Skip("DSEC_WRITE_TRAJ_FIXTURE not set")
	}
	for _, kind := range []string{"pebble", "bolt"} {
		var store trajectory.Store
		var err error
		if kind == "pebble" {
			store, err = trajectory.OpenPebble(filepath.Join(dir, "pebble"), trajectory.PebbleOptions{})
		} else {
			store, err = trajectory.OpenBolt(filepath.Join(dir, "trajectories.db"))
		}
		if err != nil {
			t.Fatal(err)
		}
		node := servertest.NewNode(t.TempDir())
		srv := httptest.NewServer(server.New(fnNode{node}, server.Options{Token: token, Trajectories: store}).Handler())
		e := &env{t: t, node: node, srv: srv}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("X-App", "yes")
			w.WriteHeader(201)
			fmt.Fprintf(w, "app %s %s", r.Method, r.URL.RequestURI())
		})}
		go hs.Serve(l)
		e.node.ExposePort(8080, l.Addr().String())
		sb := e.create()
		base := "/v1/sandboxes/" + sb.ID
		traj := "legacy-" + kind
		n := 0
		step := func(method, path, body string, want int) {
			n++
			resp, b := e.do(method, path, strings.NewReader(body), stepHdr(traj, fmt.Sprint(n))...)
			if resp.StatusCode != want {
				t.Fatalf("%s step %d %s %s: %d %s", kind, n, method, path, resp.StatusCode, b)
			}
		}
		var tb bytes.Buffer
		tw := tar.NewWriter(&tb)
		tw.WriteHeader(&tar.Header{Name: "a.txt", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg, ModTime: time.Unix(1700000000, 0)})
		tw.Write([]byte("hi"))
		tw.Close()
		step("POST", base+"/exec", `{"cmd":["echo","one"]}`, 200)                                                                                 // 1
		step("POST", base+"/exec", `{"cmd":["exit","3"]}`, 200)                                                                                   // 2
		step("POST", base+"/exec/stream", `{"cmd":["echo","streamed"]}`+"\n"+`{"eof":true}`+"\n", 200)                                            // 3
		step("POST", base+"/exec/stream", `{"cmd":["cat"],"stdin":"in"}`+"\n"+`{"eof":true}`+"\n", 200)                                           // 4
		step("POST", base+"/processes", `{"cmd":["echo","bg"]}`, 201)                                                                             // 5
		step("PUT", base+"/files?path=/f.txt&mode=0600", "hello", 200)                                                                            // 6
		step("GET", base+"/files?path=/f.txt", "", 200)                                                                                           // 7
		step("POST", base+"/files/mkdir", `{"path":"/d","parents":true}`, 204)                                                                    // 8
		step("DELETE", base+"/files?path=/nope", "", 404)                                                                                         // 9
		step("PUT", base+"/files/archive?path=/d", tb.String(), 204)                                                                              // 10
		step("DELETE", base+"/files?path=/d/a.txt", "", 204)                                                                                      // 11
		step("POST", base+"/http/8080/x/y?q=1", "ping", 201)                                                                                      // 12
		step("GET", base+"/files?path=/none", "", 404)                                                                                            // 13
		step("POST", "/v1/fncall", `{"language":"python3","files":{"main.py":"print(1)"},"tests":[{"stdin":"x","expected_output":"1\\n"}]}`, 200) // 14
		// Step 15 started and never finished: the server died while it ran.
		if _, err := store.Begin(context.Background(), trajectory.BeginRequest{Trajectory: traj, N: 15, Op: trajectory.OpExec,
			Fingerprint: "sha256:unfinished", SandboxID: sb.ID, Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		hs.Close()
		srv.Close()
		if err := store.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// fnNode adds a FnCaller to the fake node: every call is accepted.
type fnNode struct{ *servertest.Node }

func (fnNode) Call(_ context.Context, req api.FnCallRequest) (api.FnCallResult, error) {
	return api.FnCallResult{Verdict: api.VerdictAccepted, Tests: []api.FnCallTestResult{{Verdict: api.VerdictAccepted, Stdout: "1\n"}}}, nil
}
