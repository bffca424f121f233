package clustere2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/metrics/metricstest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// noFnCallNode is the agent started with --no-fncall: FnCalls must never
// land there.
const noFnCallNode = "n3"

// fnCallsPerNode is the other agents' --max-fncalls (small, so a burst fills
// the cluster).
const fnCallsPerNode = 2

// blobs is the cluster's shared blob store (a directory every process of
// this machine reaches, as a shared mount would on many).
func (e *env) blobs() string { return filepath.Join(e.dir, "blobs") }

// image runs `dsec image ARGS` against the cluster's etcd and blob store, as
// an operator's machine would (its own data dir, no agent).
func (e *env) image(args ...string) (string, error) {
	full := append([]string{"image"}, args...)
	full = append(full, "--etcd", e.etcdEPs, "--blob-store", "dir:"+e.blobs(), "--data-dir", filepath.Join(e.dir, "operator"))
	out, err := exec.Command(e.bin, full...).CombinedOutput()
	return string(out), err
}

// sharedState: environments composed once (through an API server or the CLI
// with --etcd) serve every node; removal is refused while any node uses
// them; FnCalls go to nodes that serve FnCall.
func sharedState(ctx context.Context, t *testing.T, e *env) {
	token := randHex(8)
	t.Run("compose once, create from it on every node", func(t *testing.T) {
		// Layers built on "the operator's machine" into the shared blob store,
		// named in etcd.
		tk := t.TempDir()
		if err := os.MkdirAll(filepath.Join(tk, "opt", "shared"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tk, "opt", "shared", "hello.txt"), []byte(token), 0o644); err != nil {
			t.Fatal(err)
		}
		images := os.Getenv("DSEC_IMAGES_DIR")
		if images == "" {
			images = "/var/lib/dsec/images"
		}
		for _, b := range [][2]string{{"e2e-base", "dir:" + filepath.Join(images, "busybox", "rootfs")}, {"e2e-tool", "dir:" + tk}} {
			if out, err := e.image("build", "--from", b[1], "--name", b[0]); err != nil {
				t.Fatalf("image build %s: %v\n%s", b[0], err, out)
			}
		}
		// Compose through API server 0 (into etcd).
		t0 := time.Now()
		status, _, body := e.raw(t, 0, "POST", "/v1/images", api.ComposeImageRequest{Name: "e2e-env", Base: "e2e-base", Toolkits: []string{"e2e-tool"}})
		t.Logf("compose through an API server (etcd): %v", time.Since(t0).Round(time.Microsecond))
		if status != http.StatusCreated {
			t.Fatalf("compose: %d %s", status, body)
		}
		// And with the CLI on the operator's machine.
		if out, err := e.image("compose", "--name", "e2e-env2", "--base", "e2e-base"); err != nil {
			t.Fatalf("image compose --etcd: %v\n%s", err, out)
		}
		// API server 1 lists both.
		status, _, body = e.raw(t, 1, "GET", "/v1/images", nil)
		var list []api.Image
		if status != 200 || json.Unmarshal([]byte(body), &list) != nil {
			t.Fatalf("list: %d %s", status, body)
		}
		found := map[string]api.Image{}
		for _, img := range list {
			found[img.Name] = img
		}
		if img := found["e2e-env"]; img.Kind != "layered" || len(img.Layers) != 2 || found["e2e-env2"].Kind != "layered" {
			t.Fatalf("API server 1 lists %+v", list)
		}
		// A sandbox from it on every node, none of which saw it before: the
		// file only the new layer has.
		var ids []string
		for _, a := range e.agents {
			t0 := time.Now()
			sb, err := e.client(1).Create(ctx, api.CreateSandboxRequest{Image: "e2e-env", Node: a.node})
			if err != nil {
				t.Fatalf("create from e2e-env on %s: %v", a.node, err)
			}
			el := time.Since(t0)
			ids = append(ids, sb.ID)
			r, err := e.client(0).Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"cat", "/opt/shared/hello.txt"}})
			if err != nil || r.Stdout != token {
				t.Fatalf("%s: cat = %q %v, want %q", a.node, r.Stdout, err, token)
			}
			// The same node's create from its directory image, for comparison.
			t0 = time.Now()
			dsb, err := e.client(1).Create(ctx, api.CreateSandboxRequest{Node: a.node})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("create on %s: from an environment it never saw %v, from the directory image %v",
				a.node, el.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
			if err := e.client(1).Delete(ctx, dsb.ID); err != nil {
				t.Fatal(err)
			}
		}
		// Each node's accounting, summed: three sandboxes hold the layers.
		var img api.Image
		status, _, body = e.raw(t, 0, "GET", "/v1/images/e2e-env", nil)
		if status != 200 || json.Unmarshal([]byte(body), &img) != nil || len(img.Layers) != 2 {
			t.Fatalf("inspect: %d %s", status, body)
		}
		if l := img.Layers[1]; !l.Mounted || l.Sandboxes != len(e.agents) {
			t.Errorf("toolkit layer accounting %+v, want mounted, %d sandboxes", l, len(e.agents))
		}

		// record through an API server: a node that read the layers stores
		// their access lists, in the shared blob store, as prefetch lists.
		status, _, body = e.raw(t, 1, "POST", "/v1/images/e2e-env/record", nil)
		var rec []api.RecordedLayer
		if status != 200 || json.Unmarshal([]byte(body), &rec) != nil || len(rec) == 0 {
			t.Fatalf("record: %d %s", status, body)
		}
		shared, err := blob.Open("dir:"+e.blobs(), false)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rec {
			if _, err := shared.Stat(ctx, r.List); err != nil {
				t.Errorf("prefetch list %s is not in the shared blob store: %v", r.List, err)
			}
		}
		status, _, body = e.raw(t, 0, "GET", "/v1/images/e2e-env", nil)
		if status != 200 || !strings.Contains(body, rec[0].List) {
			t.Errorf("inspect after record: %d %s (want prefetch list %s)", status, body, rec[0].List)
		}

		// rm is refused while in use, through either API server and the CLI.
		for i := range e.apiAddr {
			status, _, body = e.raw(t, i, "DELETE", "/v1/images/e2e-env", nil)
			if status != http.StatusConflict || !strings.Contains(body, "in use") {
				t.Errorf("rm in use via API server %d: %d %s", i, status, body)
			}
		}
		if out, err := e.image("rm", "e2e-env"); err == nil || !strings.Contains(out, "in use") {
			t.Errorf("image rm --etcd of an environment in use: %v %s", err, out)
		}
		if out, err := e.image("rm", "e2e-tool"); err == nil || !strings.Contains(out, "used by environment") {
			t.Errorf("image rm --etcd of a layer an environment uses: %v %s", err, out)
		}
		for _, id := range ids[1:] {
			if err := e.client(0).Delete(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		status, _, body = e.raw(t, 1, "DELETE", "/v1/images/e2e-env", nil)
		if status != http.StatusConflict || !strings.Contains(body, e.agents[0].node) {
			t.Errorf("rm while one node still uses it: %d %s (want 409 naming %s)", status, body, e.agents[0].node)
		}
		if err := e.client(1).Delete(ctx, ids[0]); err != nil {
			t.Fatal(err)
		}
		if status, _, body = e.raw(t, 0, "DELETE", "/v1/images/e2e-env", nil); status != http.StatusNoContent {
			t.Fatalf("rm once unused: %d %s", status, body)
		}
		if status, _, _ = e.raw(t, 1, "GET", "/v1/images/e2e-env", nil); status != http.StatusNotFound {
			t.Errorf("inspect after rm: %d", status)
		}
		if out, err := e.image("rm", "e2e-env2"); err != nil {
			t.Errorf("image rm --etcd: %v %s", err, out)
		}
	})

	t.Run("bad input changes nothing", func(t *testing.T) {
		before := e.count(t)
		_, _, listBefore := e.raw(t, 0, "GET", "/v1/images", nil)
		for _, c := range []struct {
			name   string
			method string
			path   string
			body   any
			status int
			code   api.Code
		}{
			{"create from an unknown environment", "POST", "/v1/sandboxes", api.CreateSandboxRequest{Image: "no-such-env"}, 404, api.CodeNotFound},
			{"compose from a missing layer", "POST", "/v1/images", api.ComposeImageRequest{Name: "e2e-bad", Base: "e2e-base", Toolkits: []string{"no-such-layer"}}, 404, api.CodeNotFound},
			{"compose from a missing blob", "POST", "/v1/images", api.ComposeImageRequest{Name: "e2e-bad", Base: "sha256:" + strings.Repeat("0", 64)}, 404, api.CodeNotFound},
			{"compose with a bad name", "POST", "/v1/images", api.ComposeImageRequest{Name: "Bad/Name", Base: "e2e-base"}, 400, api.CodeInvalidArgument},
			{"rm of an unknown name", "DELETE", "/v1/images/no-such-env", nil, 404, api.CodeNotFound},
		} {
			status, _, body := e.raw(t, 1, c.method, c.path, c.body)
			var eb api.ErrorBody
			if status != c.status || json.Unmarshal([]byte(body), &eb) != nil || eb.Error == nil || eb.Error.Code != c.code {
				t.Errorf("%s: %d %s, want %d %s", c.name, status, body, c.status, c.code)
			}
		}
		if after := e.count(t); after != before {
			t.Errorf("bad input left %d sandboxes", after-before)
		}
		if _, _, listAfter := e.raw(t, 0, "GET", "/v1/images", nil); listAfter != listBefore {
			t.Errorf("bad input changed the images:\nbefore %s\nafter  %s", listBefore, listAfter)
		}
	})

	t.Run("FnCalls land on nodes serving FnCall", func(t *testing.T) {
		nodes, err := e.client(0).Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			serves := false
			for _, b := range n.Backends {
				serves = serves || b == api.BackendFnCall
			}
			if serves == (n.Name == noFnCallNode) || serves && n.MaxFnCalls != fnCallsPerNode {
				t.Errorf("node %s backends %v, max FnCalls %d", n.Name, n.Backends, n.MaxFnCalls)
			}
		}
		want := "42"
		wrong := "41"
		call := func(expected *string) api.FnCallRequest {
			return api.FnCallRequest{Language: api.LangPython3, Files: map[string]string{"main.py": "print(int(input()) * 2)"},
				Tests: []api.FnCallTest{{Stdin: "21", ExpectedOutput: expected}}}
		}
		for i := range e.apiAddr {
			for range 3 {
				t0 := time.Now()
				status, _, body := e.raw(t, i, "POST", "/v1/fncall", call(&want))
				var res api.FnCallResult
				if status != 200 || json.Unmarshal([]byte(body), &res) != nil || res.Verdict != api.VerdictAccepted {
					t.Fatalf("fncall via API server %d: %d %s", i, status, body)
				}
				t.Logf("fncall via API server %d: %v", i, time.Since(t0).Round(time.Millisecond))
			}
			status, _, body := e.raw(t, i, "POST", "/v1/fncall", call(&wrong))
			if !strings.Contains(body, `"verdict":"`+api.VerdictWrongAnswer+`"`) || status != 200 {
				t.Errorf("wrong answer via API server %d: %d %s", i, status, body)
			}
			status, _, body = e.raw(t, i, "POST", "/v1/fncall/batch", api.FnCallBatchRequest{Calls: []api.FnCallRequest{call(&want), call(&wrong)}})
			if status != 200 || !strings.Contains(body, api.VerdictAccepted) || !strings.Contains(body, api.VerdictWrongAnswer) {
				t.Errorf("batch via API server %d: %d %s", i, status, body)
			}
			status, _, body = e.raw(t, i, "POST", "/run_code", map[string]any{"code": "print(6*7)", "language": "python"})
			if status != 200 || !strings.Contains(body, "42") {
				t.Errorf("SandboxFusion /run_code via API server %d: %d %s", i, status, body)
			}
		}
		// A burst of slow calls beyond the cluster's room (2 nodes × 2): each is
		// answered, accepted or 429 with Retry-After, never a hang or a 5xx.
		slow := api.FnCallRequest{Language: api.LangPython3, Files: map[string]string{"main.py": "import time\ntime.sleep(3)\nprint(42)"},
			Tests: []api.FnCallTest{{ExpectedOutput: &want}}, Limits: api.FnCallLimits{WallTimeMs: 20000}}
		const burst = 16
		type answer struct {
			status int
			retry  string
			body   string
		}
		answers := make(chan answer, burst)
		for i := range burst {
			go func() {
				status, hdr, body := e.raw(t, i%2, "POST", "/v1/fncall", slow)
				answers <- answer{status, hdr.Get("Retry-After"), body}
			}()
		}
		accepted, exhausted := 0, 0
		for range burst {
			a := <-answers
			switch {
			case a.status == 200 && strings.Contains(a.body, `"verdict":"accepted"`):
				accepted++
			case a.status == 429 && a.retry != "" && strings.Contains(a.body, "resource_exhausted"):
				exhausted++
			default:
				t.Errorf("burst answer %d %q %s", a.status, a.retry, a.body)
			}
		}
		t.Logf("burst of %d slow FnCalls, room for %d: %d accepted, %d resource_exhausted", burst, 2*fnCallsPerNode, accepted, exhausted)
		if accepted < 2*fnCallsPerNode || exhausted == 0 {
			t.Errorf("burst: %d accepted (want ≥ %d), %d exhausted (want some)", accepted, 2*fnCallsPerNode, exhausted)
		}
		// The same burst through SandboxFusion's /run_code is queued, not
		// refused: verl scores a 429 or 503 as a wrong answer and retries only
		// a 504, so the answers are verdicts (or 504 past the wait budget).
		sfAnswers := make(chan answer, burst)
		for i := range burst {
			go func() {
				status, _, body := e.raw(t, i%2, "POST", "/run_code", map[string]any{"code": "import time\ntime.sleep(1)\nprint(42)",
					"language": "python", "run_timeout": 20})
				sfAnswers <- answer{status: status, body: body}
			}()
		}
		verdicts, timeouts := 0, 0
		for range burst {
			switch a := <-sfAnswers; {
			case a.status == 200 && strings.Contains(a.body, `"status":"Success"`) && strings.Contains(a.body, "42"):
				verdicts++
			case a.status == 504:
				timeouts++
			default:
				t.Errorf("SandboxFusion burst answer %d %s", a.status, a.body)
			}
		}
		t.Logf("SandboxFusion burst of %d slow calls, room for %d: %d verdicts, %d 504", burst, 2*fnCallsPerNode, verdicts, timeouts)
		if verdicts != burst {
			t.Errorf("SandboxFusion burst: %d of %d verdicts within the 60 s wait budget", verdicts, burst)
		}
		// Only nodes serving FnCall started a warm pool.
		served := 0
		for _, a := range e.agents {
			ntok, err := os.ReadFile(filepath.Join(a.dataDir, "token"))
			if err != nil {
				t.Fatal(err)
			}
			m, err := metricstest.Scrape("http://"+a.addr+"/metrics", strings.TrimSpace(string(ntok)))
			if err != nil {
				t.Fatal(err)
			}
			slots := m.Value("dsec_fncall_pool_slots", "image=judge")
			if a.node == noFnCallNode && slots != 0 {
				t.Errorf("%s (--no-fncall) ran FnCalls: pool slots %v", a.node, slots)
			}
			if slots > 0 {
				served++
			}
		}
		if served == 0 {
			t.Error("no node shows a FnCall pool")
		}
	})
}
