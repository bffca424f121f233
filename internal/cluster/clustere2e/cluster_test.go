package clustere2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/metrics/metricstest"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// TestCluster builds one cluster and runs every case on it, in order (later
// cases kill and restart parts of it).
func TestCluster(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	byNode := map[string][]string{} // node → sandboxes created on it
	createsVia := map[int]int{}     // API server → creates it answered

	create := func(t *testing.T, api_ int, req api.CreateSandboxRequest) api.Sandbox {
		t.Helper()
		sb, err := e.client(api_).Create(ctx, req)
		createsVia[api_]++
		if err != nil {
			t.Fatalf("create through API server %d: %v", api_, err)
		}
		node, _ := session.NodeOf(sb.ID)
		byNode[node] = append(byNode[node], sb.ID)
		return sb
	}
	execOut := func(api_ int, id string, cmd ...string) (string, error) {
		// Each call has its own deadline, as a trainer's would: before the lease
		// of a node whose link was cut expires, a call to it waits on the RPC.
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		r, err := e.client(api_).Exec(cctx, id, api.ExecRequest{Cmd: cmd})
		if err != nil {
			return "", err
		}
		return r.Stdout, nil
	}

	t.Run("nodes registered", func(t *testing.T) {
		nodes, err := e.client(1).Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes) != 3 {
			t.Fatalf("nodes = %+v, want n1 n2 n3", nodes)
		}
		for _, n := range nodes {
			if n.State != api.NodeReady || n.MaxSandboxes != 12 || n.Labels["zone"] != "z"+n.Name[1:] {
				t.Errorf("node %+v", n)
			}
		}
	})

	t.Run("wrong cluster secret is refused", func(t *testing.T) {
		bad := filepath.Join(e.dir, "bad-secret")
		if err := os.WriteFile(bad, []byte(randHex(24)), 0o600); err != nil {
			t.Fatal(err)
		}
		a := e.agents[0]
		out, err := exec.Command("nsenter", "--net=/run/netns/"+a.ns, "--", e.bin, "agent", "--etcd", e.etcdEPs,
			"--node-name", "intruder", "--listen", strings.Replace(a.addr, ":7071", ":7072", 1),
			"--data-dir", filepath.Join(e.dir, "intruder"), "--cluster-secret-file", bad).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "wrong cluster secret") {
			t.Fatalf("agent with a wrong secret: err %v, output:\n%s", err, out)
		}
		nodes, _ := e.client(0).Nodes(ctx)
		for _, n := range nodes {
			if n.Name == "intruder" {
				t.Fatalf("the intruder is registered: %+v", n)
			}
		}
		_, err = e.client(0).Create(ctx, api.CreateSandboxRequest{Node: "intruder"})
		createsVia[0]++ // the overview's rate counts every create answered, refused ones too
		if ae, ok := api.AsError(err); !ok || ae.Status != 400 || ae.Code != api.CodeInvalidArgument {
			t.Fatalf("create --node intruder: %v", err)
		}
	})

	t.Run("creates spread over the nodes", func(t *testing.T) {
		for i := 0; i < 9; i++ {
			create(t, i%2, api.CreateSandboxRequest{})
		}
		for _, a := range e.agents {
			if len(byNode[a.node]) == 0 {
				t.Errorf("no sandbox on %s: %v", a.node, byNode)
			}
		}
	})

	t.Run("metrics and dashboard of the API tier and the agents", func(t *testing.T) {
		url := "http://" + e.apiAddr[0]
		before, err := metricstest.Scrape(url+"/metrics", e.token)
		if err != nil {
			t.Fatal(err)
		}
		mine := []string{create(t, 0, api.CreateSandboxRequest{}).ID, create(t, 0, api.CreateSandboxRequest{}).ID}
		after, err := metricstest.Scrape(url+"/metrics", e.token)
		if err != nil {
			t.Fatal(err)
		}
		delta := func(name string, labels ...string) float64 {
			return after.Value(name, labels...) - before.Value(name, labels...)
		}
		if d := delta("dsec_sandbox_creates_total", "backend=container", "result=ok"); d != 2 {
			t.Errorf("creates_total moved by %v, want 2", d)
		}
		if d := delta("dsec_sandbox_create_phase_duration_seconds_count", "backend=container", "phase=placement"); d != 2 {
			t.Errorf("placement phase count moved by %v, want 2", d)
		}
		if d := delta("dsec_http_requests_total", "method=POST", "status=201"); d != 2 {
			t.Errorf("http_requests_total{POST,201} moved by %v, want 2", d)
		}
		if v := after.Value("dsec_cluster_nodes", "state=ready"); v != 3 {
			t.Errorf("dsec_cluster_nodes{state=ready} = %v, want 3", v)
		}
		for _, tok := range []string{"", "wrong-" + randHex(4)} {
			if _, err := metricstest.Scrape(url+"/metrics", tok); err == nil || !strings.Contains(err.Error(), "401") {
				t.Errorf("/metrics with token %q: %v, want 401", tok, err)
			}
		}
		// The agent's own registry, behind the node's DATA_DIR/token.
		a := e.agents[0]
		ntok, err := os.ReadFile(filepath.Join(a.dataDir, "token"))
		if err != nil {
			t.Fatal(err)
		}
		nm, err := metricstest.Scrape("http://"+a.addr+"/metrics", strings.TrimSpace(string(ntok)))
		if err != nil {
			t.Fatalf("agent /metrics: %v", err)
		}
		// (The node RPC serves the agent itself, not the session decorator:
		// an agent's creates show in its phases and its sandboxes gauge.)
		if v := nm.Value("dsec_sandboxes", "state=running"); v != float64(len(byNode[a.node])) {
			t.Errorf("agent %s: dsec_sandboxes{state=running} = %v, want the %d it holds", a.node, v, len(byNode[a.node]))
		}
		if v := nm.Value("dsec_sandbox_create_phase_duration_seconds_count", "phase=admission"); v != float64(len(byNode[a.node])) {
			t.Errorf("agent %s: admission phase count = %v, want %d", a.node, v, len(byNode[a.node]))
		}
		// Its node RPC listener counts the creates the API servers sent it.
		if v := nm.Value("dsec_rpc_requests_total", "procedure=Create", "code=ok"); v != float64(len(byNode[a.node])) {
			t.Errorf("agent %s: dsec_rpc_requests_total{Create,ok} = %v, want %d", a.node, v, len(byNode[a.node]))
		}
		if _, err := metricstest.Scrape("http://"+a.addr+"/metrics", e.token); err == nil {
			t.Error("agent /metrics accepted the API tier's token")
		}
		getJSON := func(path string, v any) {
			t.Helper()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+path, nil)
			req.Header.Set("Authorization", "Bearer "+e.token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("GET %s: %s %s", path, resp.Status, b)
			}
			if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
		}
		// The dashboard's images view: every node's images, each node named.
		var imgs []api.Image
		getJSON("/v1/images", &imgs)
		def := -1
		for i, img := range imgs {
			if img.Default {
				def = i
			}
		}
		if def < 0 || len(imgs[def].Nodes) != 3 {
			t.Errorf("images through the API server: %+v, want the default image on n1, n2 and n3", imgs)
		}
		// Per-sandbox CPU and memory, from the sandboxes' own nodes.
		var use struct{ Sandboxes []api.SandboxUsage }
		getJSON("/ui/api/usage?id="+mine[0]+"&id="+mine[1], &use)
		if len(use.Sandboxes) != 2 {
			t.Fatalf("usage of %v: %+v", mine, use)
		}
		for _, u := range use.Sandboxes {
			if (u.ID != mine[0] && u.ID != mine[1]) || u.MemoryBytes <= 0 || u.CPUSeconds < 0 || u.State != api.StateRunning {
				t.Errorf("usage %+v, want a running container's memory and CPU time", u)
			}
		}
		// The dashboard's overview lists every node from the watcher.
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/ui/api/overview", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("overview without a token: %s, want 401", resp.Status)
		}
		req.Header.Set("Authorization", "Bearer "+e.token)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var ov struct {
			Nodes []struct {
				Name, State, Addr string
				Sandboxes         int
				MaxSandboxes      int64 `json:"max_sandboxes"`
			} `json:"nodes"`
			Sandboxes struct{ Total int }     `json:"sandboxes"`
			Rates     struct{ Creates []int } `json:"rates"`
		}
		err = json.NewDecoder(resp.Body).Decode(&ov)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("overview: %s %v", resp.Status, err)
		}
		if resp.Header.Get("X-Request-Id") == "" {
			t.Error("the API server's answer carries no X-Request-Id")
		}
		total := 0
		for _, ids := range byNode {
			total += len(ids)
		}
		if len(ov.Nodes) != 3 || ov.Sandboxes.Total != total {
			t.Fatalf("overview: %+v, want 3 nodes and %d sandboxes", ov, total)
		}
		rated := 0
		for _, n := range ov.Rates.Creates {
			rated += n
		}
		if rated != createsVia[0] {
			t.Errorf("the overview's create rate counts %d creates, want the %d made through this API server", rated, createsVia[0])
		}
		for _, n := range ov.Nodes {
			if n.State != "ready" || n.Addr == "" || n.MaxSandboxes != 12 || n.Sandboxes != len(byNode[n.Name]) {
				t.Errorf("overview node %+v, want ready, max 12, %d sandboxes", n, len(byNode[n.Name]))
			}
		}
	})

	t.Run("session calls through either API server", func(t *testing.T) {
		for _, a := range e.agents {
			id := byNode[a.node][0]
			for i := 0; i < 2; i++ {
				cl := e.client(i)
				if out, err := execOut(i, id, "sh", "-c", "echo hi from $(hostname)"); err != nil || !strings.HasPrefix(out, "hi from") {
					t.Errorf("exec on %s via %d: %q %v", id, i, out, err)
				}
				want := fmt.Sprintf("file via %d", i)
				if _, err := cl.WriteFile(ctx, id, "/tmp/f", 0o644, strings.NewReader(want)); err != nil {
					t.Fatalf("write file: %v", err)
				}
				rc, err := e.client(1-i).ReadFile(ctx, id, "/tmp/f")
				if err != nil {
					t.Fatalf("read file: %v", err)
				}
				got, _ := io.ReadAll(rc)
				rc.Close()
				if string(got) != want {
					t.Errorf("read back %q, want %q", got, want)
				}
				var out bytes.Buffer
				if _, err := cl.ExecStream(ctx, id, api.ExecRequest{Cmd: []string{"tr", "a-z", "A-Z"}}, strings.NewReader("streamed\n"), &out, io.Discard); err != nil || out.String() != "STREAMED\n" {
					t.Errorf("stream: %q %v", out.String(), err)
				}
				out.Reset()
				if _, err := cl.ExecStreamWithOptions(ctx, id, api.ExecRequest{Cmd: []string{"sh", "-c", "tty; stty size"}, TTY: true, Cols: 100, Rows: 30},
					client.StreamOptions{Stdout: &out}); err != nil || !strings.Contains(out.String(), "/dev/pts/") || !strings.Contains(out.String(), "30 100") {
					t.Errorf("pty: %q %v", out.String(), err)
				}
			}
		}
		// One-request runs: create, stream and delete through one API server;
		// the sandbox lives on a node and is gone for the other API server.
		for i := 0; i < 2; i++ {
			var out bytes.Buffer
			s, err := e.client(i).StartRun(ctx, api.RunRequest{Exec: api.ExecRequest{Cmd: []string{"tr", "a-z", "A-Z"}}, Remove: true},
				client.StreamOptions{Stdin: strings.NewReader("run\n"), Stdout: &out})
			if err != nil {
				t.Fatalf("run via %d: %v", i, err)
			}
			id := s.Sandbox().ID
			if node, _ := session.NodeOf(id); node == "" {
				t.Errorf("run via %d: sandbox %q names no node", i, id)
			}
			if res, err := s.Wait(); err != nil || res.ExitCode != 0 || out.String() != "RUN\n" || s.RemoveError() != nil {
				t.Errorf("run via %d: %+v %v %q (remove: %v)", i, res, err, out.String(), s.RemoveError())
			}
			if _, err := e.client(1-i).Get(ctx, id); errCode(err) != api.CodeNotFound {
				t.Errorf("the sandbox of a run with remove via %d, through %d: %v", i, 1-i, err)
			}
		}
	})

	t.Run("trajectory steps through either API server", func(t *testing.T) {
		// A step logged on the sandbox's node through API server 0 is answered
		// from that node's log when re-issued through API server 1: the nonce
		// it printed comes back, nothing runs again.
		id := byNode[e.agents[0].node][0]
		traj := "e2e-" + randHex(4)
		body := api.ExecRequest{Cmd: []string{"sh", "-c", "head -c 8 /dev/urandom | od -An -tx1"}}
		st0, h0, out0 := e.step(t, 0, traj, 1, "/v1/sandboxes/"+id+"/exec", body)
		st1, h1, out1 := e.step(t, 1, traj, 1, "/v1/sandboxes/"+id+"/exec", body)
		stdout := func(body string) string {
			var r api.ExecResult
			_ = json.Unmarshal([]byte(body), &r)
			return r.Stdout
		}
		if st0 != 200 || st1 != 200 || h0.Get(api.ReplayedHeader) != "" || h1.Get(api.ReplayedHeader) != "true" || stdout(out0) == "" || stdout(out0) != stdout(out1) {
			t.Fatalf("step via 0: %d replayed=%q %s\nre-issued via 1: %d replayed=%q %s", st0, h0.Get(api.ReplayedHeader), out0, st1, h1.Get(api.ReplayedHeader), out1)
		}
		if st, h, out := e.step(t, 1, traj, 2, "/v1/sandboxes/"+id+"/exec", body); st != 200 || h.Get(api.ReplayedHeader) != "" || stdout(out) == stdout(out0) {
			t.Errorf("step 2 (new) via 1: %d %s", st, out)
		}
		got, err := e.client(1).GetTrajectory(ctx, traj)
		if err != nil || got.SandboxID != id || len(got.Steps) != 2 {
			t.Fatalf("trajectory via 1: %+v %v", got, err)
		}
		list, err := e.client(0).ListTrajectories(ctx)
		found := false
		for _, tr := range list {
			found = found || tr.ID == traj
		}
		if err != nil || !found {
			t.Errorf("list via 0 lacks %s: %v %v", traj, list, err)
		}
		if _, err := e.client(0).GetTrajectory(ctx, "no-such-"+traj); errCode(err) != api.CodeNotFound {
			t.Errorf("unknown trajectory: %v", err)
		}
	})

	t.Run("proxy and stream steps through either API server", func(t *testing.T) {
		e.proxyAndStreamSteps(t, ctx, byNode[e.agents[1].node][0])
	})

	t.Run("E2B and SandboxFusion front ends on the API servers", func(t *testing.T) {
		for i := 0; i < 2; i++ {
			req, _ := http.NewRequest("GET", "http://"+e.apiAddr[i]+"/sandboxes", nil)
			req.Header.Set("X-API-Key", "e2b_"+e.token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var list []map[string]any
			err = json.NewDecoder(resp.Body).Decode(&list)
			resp.Body.Close()
			if resp.StatusCode != 200 || err != nil {
				t.Errorf("E2B GET /sandboxes via %d: %d %v", i, resp.StatusCode, err)
			}
			req, _ = http.NewRequest("GET", "http://"+e.apiAddr[i]+"/sandboxes", nil)
			req.Header.Set("X-API-Key", "e2b_wrong")
			if resp, err = http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
				t.Errorf("E2B with a wrong key via %d: %v %v", i, resp.Status, err)
			}
			resp.Body.Close()
			resp, err = http.Post("http://"+e.apiAddr[i]+"/run_code", "application/json", strings.NewReader(`{"code":"print(1)","language":"python"}`))
			if err != nil || resp.StatusCode != 401 {
				t.Errorf("SandboxFusion /run_code without a token via %d: %v %v (404: not mounted)", i, resp.Status, err)
			}
			resp.Body.Close()
		}
	})

	// Environments in etcd and FnCall placement (shared_test.go).
	t.Run("shared state", func(t *testing.T) { sharedState(ctx, t, e) })

	t.Run("API tier latency against one dsec server", func(t *testing.T) {
		// The same calls, in the same run, through an API server (HTTP, placement,
		// node RPC over a veth) and straight to a one-machine `dsec server`.
		dir := filepath.Join(e.dir, "single")
		addr := freePort(t, "127.0.0.1")
		p := &proc{name: "dsec server", args: []string{"server", "--data-dir", dir, "--node-name", "single",
			"--listen", addr, "--cleanup-on-exit"}}
		e.start(p)
		defer p.stop(syscall.SIGTERM)
		e.waitFor("dsec server listening", 30*time.Second, func() error {
			if !strings.Contains(p.logs.String(), "dsec server listening") {
				return fmt.Errorf("not yet")
			}
			return nil
		})
		tok, err := os.ReadFile(filepath.Join(dir, "token"))
		if err != nil {
			t.Fatal(err)
		}
		single := client.New("http://"+addr, strings.TrimSpace(string(tok)), client.WithRetry(0))
		// Few creates: a deleted sandbox's place counts in this API server's
		// placements until the node's next report (every 2 s).
		measure := func(cl *client.Client, n int) (creates, execs []time.Duration) {
			for i := 0; i < n; i++ {
				t0 := time.Now()
				sb, err := cl.Create(ctx, api.CreateSandboxRequest{})
				if err != nil {
					t.Fatal(err)
				}
				creates = append(creates, time.Since(t0))
				for j := 0; j < 5; j++ {
					t0 = time.Now()
					if _, err := cl.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}}); err != nil {
						t.Fatal(err)
					}
					execs = append(execs, time.Since(t0))
				}
				if err := cl.Delete(ctx, sb.ID); err != nil {
					t.Fatal(err)
				}
			}
			return creates, execs
		}
		measure(single, 1) // warm both paths (connections, page cache) first
		measure(e.client(0), 1)
		sc, se := measure(single, 8)
		ac, ae := measure(e.client(0), 8)
		t.Logf("create p50/p99: dsec server %s/%s, API server %s/%s; exec true p50/p99: dsec server %s/%s, API server %s/%s",
			pct(sc, 50), pct(sc, 99), pct(ac, 50), pct(ac, 99), pct(se, 50), pct(se, 99), pct(ae, 50), pct(ae, 99))
	})

	t.Run("bad input", func(t *testing.T) {
		for _, c := range []struct {
			name string
			req  api.CreateSandboxRequest
			msg  string
		}{
			{"unknown node", api.CreateSandboxRequest{Node: "n9"}, `node "n9" is not in the cluster`},
			{"label nobody has", api.CreateSandboxRequest{Constraints: map[string]string{"zone": "mars"}}, "labels zone=mars"},
			{"malformed label", api.CreateSandboxRequest{Constraints: map[string]string{"zo ne": "x"}}, "label constraint"},
		} {
			_, err := e.client(0).Create(ctx, c.req)
			ae, ok := api.AsError(err)
			if !ok || ae.Status != 400 || ae.Code != api.CodeInvalidArgument || !strings.Contains(ae.Message, c.msg) {
				t.Errorf("%s: %v", c.name, err)
			}
		}
		// A constraint somebody has, and a pinned node, go there.
		sb := create(t, 1, api.CreateSandboxRequest{Constraints: map[string]string{"zone": "z2"}})
		if n, _ := session.NodeOf(sb.ID); n != "n2" {
			t.Errorf("zone=z2 went to %s", n)
		}
		sb = create(t, 0, api.CreateSandboxRequest{Node: "n3"})
		if n, _ := session.NodeOf(sb.ID); n != "n3" {
			t.Errorf("--node n3 went to %s", n)
		}
	})

	t.Run("drained node takes no new sandboxes, keeps its own", func(t *testing.T) {
		if err := e.client(0).SetDrain(ctx, "n1", true); err != nil {
			t.Fatal(err)
		}
		e.waitFor("n1 draining on both API servers", 5*time.Second, func() error {
			for i := range e.apiAddr {
				nodes, err := e.client(i).Nodes(ctx)
				if err != nil {
					return err
				}
				for _, n := range nodes {
					if n.Name == "n1" && n.State != api.NodeDraining {
						return fmt.Errorf("API server %d: n1 is %s", i, n.State)
					}
				}
			}
			return nil
		})
		e.placementCaughtUp()
		for i := 0; i < 4; i++ {
			if n, _ := session.NodeOf(create(t, i%2, api.CreateSandboxRequest{}).ID); n == "n1" {
				t.Error("a create went to the drained node")
			}
		}
		if _, err := execOut(1, byNode["n1"][0], "true"); err != nil {
			t.Errorf("a sandbox of the drained node: %v", err)
		}
		if err := e.client(1).SetDrain(ctx, "n9", true); errCode(err) != api.CodeNotFound {
			t.Errorf("drain of an unknown node: %v", err)
		}
		if err := e.client(1).SetDrain(ctx, "n1", false); err != nil {
			t.Fatal(err)
		}
		// The next cases count on n1's room: wait until both API servers place on it again.
		e.waitFor("n1 ready on both API servers", 5*time.Second, func() error {
			for i := range e.apiAddr {
				nodes, err := e.client(i).Nodes(ctx)
				if err != nil {
					return err
				}
				for _, n := range nodes {
					if n.Name == "n1" && n.State != api.NodeReady {
						return fmt.Errorf("API server %d: n1 is %s", i, n.State)
					}
				}
			}
			return nil
		})
		e.placementCaughtUp()
	})

	t.Run("batch create is all or nothing and idempotent", func(t *testing.T) {
		reqs := make([]api.CreateSandboxRequest, 4)
		for i := range reqs {
			reqs[i].RequestID = fmt.Sprintf("batch-%s-%d", randHex(4), i)
		}
		a, err := e.client(0).CreateBatch(ctx, reqs)
		if err != nil || len(a) != 4 {
			t.Fatalf("batch: %v %v", a, err)
		}
		b, err := e.client(1).CreateBatch(ctx, reqs) // a retry through the other API server
		if err != nil {
			t.Fatal(err)
		}
		for i := range a {
			if a[i].ID != b[i].ID {
				t.Errorf("retried batch made a new sandbox: %s vs %s", a[i].ID, b[i].ID)
			}
			n, _ := session.NodeOf(a[i].ID)
			byNode[n] = append(byNode[n], a[i].ID)
		}
		before := e.count(t)
		status, hdr, body := e.raw(t, 0, "POST", "/v1/sandboxes:batch", api.BatchCreateRequest{Sandboxes: make([]api.CreateSandboxRequest, 40)})
		if status != 429 || hdr.Get("Retry-After") == "" || !strings.Contains(body, "resource_exhausted") {
			t.Errorf("batch over capacity: %d %v %s", status, hdr, body)
		}
		if after := e.count(t); after != before {
			t.Errorf("a refused batch left %d sandboxes", after-before)
		}
	})

	t.Run("full cluster answers resource_exhausted with Retry-After", func(t *testing.T) {
		since := time.Now()
		e.waitFor("every node has reported its load since the last deletes", 30*time.Second, func() error {
			nodes, err := e.client(0).Nodes(ctx)
			if err != nil {
				return err
			}
			for _, n := range nodes {
				if !n.ReportedAt.After(since) {
					return fmt.Errorf("%s last reported at %s", n.Name, n.ReportedAt.Format(time.StampMilli))
				}
			}
			return nil
		})
		nodes, _ := e.client(0).Nodes(ctx)
		free := 0
		for _, n := range nodes {
			free += int(n.MaxSandboxes - n.Sandboxes)
		}
		fill, err := e.client(0).CreateBatch(ctx, make([]api.CreateSandboxRequest, free))
		if err != nil {
			t.Fatalf("filling the %d free places: %v", free, err)
		}
		status, hdr, body := e.raw(t, 1, "POST", "/v1/sandboxes", api.CreateSandboxRequest{})
		if status != 429 || hdr.Get("Retry-After") == "" || !strings.Contains(body, "resource_exhausted") {
			t.Errorf("create in a full cluster: %d %v %s", status, hdr, body)
		}
		for _, sb := range fill {
			if err := e.client(0).Delete(ctx, sb.ID); err != nil {
				t.Error(err)
			}
		}
	})

	t.Run("killing one etcd member changes nothing", func(t *testing.T) {
		e.etcds[0].stop(syscall.SIGKILL)
		time.Sleep(ttl + time.Second) // past a lease's TTL: nothing may change meanwhile (no condition to wait for)
		nodes, err := e.client(1).Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			if n.State != api.NodeReady {
				t.Errorf("node %s is %s after losing an etcd member", n.Name, n.State)
			}
		}
		sb := create(t, 0, api.CreateSandboxRequest{})
		if out, err := execOut(1, sb.ID, "echo", "ok"); err != nil || out != "ok\n" {
			t.Errorf("exec: %q %v", out, err)
		}
	})

	t.Run("killed agent: node_lost, others untouched, creates elsewhere, back after restart", func(t *testing.T) {
		a := e.agents[2]
		victim := byNode[a.node][0]
		traj := "lost-" + randHex(4)
		if st, _, out := e.step(t, 0, traj, 1, "/v1/sandboxes/"+victim+"/exec", api.ExecRequest{Cmd: []string{"true"}}); st != 200 {
			t.Fatalf("step on %s: %d %s", victim, st, out)
		}
		a.stop(syscall.SIGKILL)
		took := e.waitFor("node_lost", ttl+5*time.Second, func() error {
			_, err := execOut(0, victim, "true")
			if ae, ok := api.AsError(err); ok && ae.Code == api.CodeNodeLost && ae.Status == 503 && ae.Infrastructure && ae.Retryable {
				return nil
			}
			return fmt.Errorf("exec answered %v", err)
		})
		t.Logf("node_lost %s after kill -9 (ttl %s)", took.Round(10*time.Millisecond), ttl)
		if _, err := e.client(1).GetTrajectory(ctx, traj); errCode(err) != api.CodeNodeLost {
			t.Errorf("trajectory on the lost node: %v, want node_lost", err)
		}
		for _, other := range e.agents[:2] {
			if _, err := execOut(1, byNode[other.node][0], "true"); err != nil {
				t.Errorf("sandbox on %s: %v", other.node, err)
			}
		}
		for i := 0; i < 3; i++ {
			if n, _ := session.NodeOf(create(t, i%2, api.CreateSandboxRequest{}).ID); n == a.node {
				t.Errorf("a create went to the lost node")
			}
		}
		e.startAgent(a, e.secret)
		took = e.waitFor("the node's sandboxes answer again", 15*time.Second, func() error {
			_, err := execOut(1, victim, "true")
			return err
		})
		t.Logf("answering again %s after restart", took.Round(10*time.Millisecond))
		if tr, err := e.client(1).GetTrajectory(ctx, traj); err != nil || len(tr.Steps) != 1 {
			t.Errorf("trajectory after the node's restart: %+v %v", tr, err)
		}
	})

	t.Run("cut link behaves like a kill and heals", func(t *testing.T) {
		a := e.agents[1]
		victim := byNode[a.node][0]
		inflight := make(chan error, 1)
		go func() {
			_, err := e.client(0).Exec(ctx, victim, api.ExecRequest{Cmd: []string{"sleep", "60"}})
			inflight <- err
		}()
		e.waitFor("the in-flight exec runs on its node", 10*time.Second, func() error {
			// (the image has no ps)
			out, err := execOut(1, victim, "sh", "-c", `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' <"$f"; echo; done | grep -c '^sleep 60 $' || true`)
			if err == nil && strings.TrimSpace(out) == "0" {
				err = fmt.Errorf("no sleep 60 yet")
			}
			return err
		})
		run(t, "ip", "link", "set", a.hostIf, "down")
		took := e.waitFor("node_lost", ttl+5*time.Second, func() error {
			_, err := execOut(0, victim, "true")
			if errCode(err) == api.CodeNodeLost {
				return nil
			}
			return fmt.Errorf("exec answered %v", err)
		})
		t.Logf("node_lost %s after the link went down", took.Round(10*time.Millisecond))
		select {
		case err := <-inflight:
			if errCode(err) != api.CodeNodeLost {
				t.Errorf("the exec in flight over the cut link answered %v", err)
			}
		case <-time.After(3 * time.Second):
			t.Error("the exec in flight over the cut link still waits after the node was lost")
		}
		if _, err := execOut(0, byNode["n1"][0], "true"); err != nil {
			t.Errorf("n1's sandbox: %v", err)
		}
		run(t, "ip", "link", "set", a.hostIf, "up")
		took = e.waitFor("answering again", 40*time.Second, func() error {
			_, err := execOut(1, victim, "true")
			return err
		})
		t.Logf("answering again %s after the link came back", took.Round(10*time.Millisecond))
	})

	t.Run("killing an API server mid-burst loses no sandbox", func(t *testing.T) {
		before := e.ids(t, 1)
		const n = 10
		rids := make([]string, n)
		for i := range rids {
			rids[i] = "burst-" + randHex(6)
		}
		var mu sync.Mutex
		answered := map[string]string{}
		var first, retried atomic.Int32 // answered by API server 0; retried on 1
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(i) * 40 * time.Millisecond) // staggered: a burst, not one instant
				sb, err := e.client(0).Create(ctx, api.CreateSandboxRequest{RequestID: rids[i]})
				if err == nil {
					first.Add(1)
				} else {
					retried.Add(1)
					// The way a client recovers: the same request through another
					// API server, retried while the error is retryable (a create
					// cut off on its node answers the retry deadline_exceeded once:
					// the node deduplicated it onto the cut-off one).
					sb, err = client.New("http://"+e.apiAddr[1], e.token).Create(ctx, api.CreateSandboxRequest{RequestID: rids[i]})
				}
				if err != nil {
					t.Errorf("create %s: %v", rids[i], err)
					return
				}
				mu.Lock()
				answered[sb.ID] = rids[i]
				mu.Unlock()
			}()
		}
		// Mid-burst: once API server 0 has answered one create, the later ones
		// still come.
		e.waitFor("a create answered before the kill", 30*time.Second, func() error {
			if first.Load() == 0 {
				return fmt.Errorf("none yet")
			}
			return nil
		})
		e.apis[0].stop(syscall.SIGKILL)
		wg.Wait()
		t.Logf("%d creates answered before the kill, %d recovered through API server 1", first.Load(), retried.Load())
		if retried.Load() == 0 {
			t.Errorf("the kill cut no create: the recovery path was not exercised")
		}
		after := e.ids(t, 1)
		for id := range after {
			if !before[id] && answered[id] == "" {
				t.Errorf("sandbox %s exists but no create answered it", id)
			}
		}
		if len(answered) != n {
			t.Errorf("%d of %d creates answered", len(answered), n)
		}
		e.startAPI(0)
		if restarted := e.ids(t, 0); len(restarted) != len(after) {
			t.Errorf("the restarted API server lists %d sandboxes, want %d", len(restarted), len(after))
		}
	})
}

func errCode(err error) api.Code {
	if ae, ok := api.AsError(err); ok {
		return ae.Code
	}
	return ""
}

// ids lists every sandbox through API server i.
func (e *env) ids(t *testing.T, i int) map[string]bool {
	t.Helper()
	list, err := e.client(i).List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, sb := range list {
		m[sb.ID] = true
	}
	return m
}

func (e *env) count(t *testing.T) int { return len(e.ids(t, 0)) }

// raw sends one JSON request and returns status, headers and body.
func (e *env) raw(t *testing.T, i int, method, path string, body any) (int, http.Header, string) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, "http://"+e.apiAddr[i]+path, bytes.NewReader(b))
	return e.do(t, req)
}

// do sends req with the cluster's token and returns status, headers and body.
func (e *env) do(t *testing.T, req *http.Request) (int, http.Header, string) {
	t.Helper()
	req.Header.Set("Authorization", "Bearer "+e.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(out)
}

// step sends one JSON request tagged as step n of trajectory traj.
func (e *env) step(t *testing.T, i int, traj string, n int, path string, body any) (int, http.Header, string) {
	t.Helper()
	b, _ := json.Marshal(body)
	return e.stepReq(t, i, "POST", path, traj, n, string(b))
}

// pct is the p-th percentile of ds, rounded for the log.
func pct(ds []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))].Round(10 * time.Microsecond)
}
