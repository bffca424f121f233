package clustere2e

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/image/build"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// lines collects a build's streamed output and tells when a line holding a
// word arrived.
type lines struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lines) has(word string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Contains(l.buf.String(), word)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// buildVia starts a Dockerfile build through API server i (its context a
// directory holding dockerfile), streaming into out; the answer comes on the
// returned channel.
func (e *env) buildVia(ctx context.Context, t *testing.T, i int, name, dockerfile string, out io.Writer) <-chan buildAnswer {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(build.WriteContext(pw, dir, nil)) }()
	done := make(chan buildAnswer, 1)
	go func() {
		res, err := e.client(i).BuildImage(ctx, api.BuildImageRequest{Name: name, Output: out}, pr)
		pr.Close()
		done <- buildAnswer{res, err}
	}()
	return done
}

type buildAnswer struct {
	res api.BuildImageResult
	err error
}

// buildSandbox returns the sandbox a build of name runs its RUN step in, as
// API server i lists it ("" while there is none).
func (e *env) buildSandbox(ctx context.Context, t *testing.T, i int, name string) string {
	list, err := e.client(i).List(ctx)
	if err != nil {
		t.Fatalf("list through API server %d: %v", i, err)
	}
	for _, sb := range list {
		if sb.Labels["dsec.build"] == name {
			return sb.ID
		}
	}
	return ""
}

// TestBuildThroughAPIServer: a Dockerfile build sent to an API server runs on
// a node, its RUN output reaches the client while the RUN still runs, and the
// environment it wrote serves a create on another node through the other API
// server; a failing RUN and an unknown FROM keep their codes and messages
// across the node RPC; a client that goes away ends the node's build; an E2B
// template build through an API server streams its logs to the unmodified
// SDK.
func TestBuildThroughAPIServer(t *testing.T) {
	// Every node writes and reads layers in the cluster's one blob store.
	e := setupWith(t, 12, 2, func(e *env) { e.agentArgs = []string{"--blob-store", "dir:" + e.blobs()} })
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	token := randHex(6)
	name := "e2e-built-" + token

	t.Run("build, logs while it runs, create on another node", func(t *testing.T) {
		out := &lines{}
		t0 := time.Now()
		done := e.buildVia(ctx, t, 0, name, "FROM debian\n"+
			"RUN echo first-line-"+token+" && while [ ! -e /tmp/release ]; do sleep 0.1; done && echo "+token+" > /built.txt\n"+
			"CMD [\"/bin/sh\"]\n", out)
		e.waitFor("the RUN's first line through the API server", 3*time.Minute, func() error {
			select {
			case a := <-done:
				t.Fatalf("the build answered before its RUN was released: %+v %v\noutput:\n%s", a.res, a.err, out)
			default:
			}
			if !out.has("first-line-" + token) {
				return errors.New("not yet: " + out.String())
			}
			return nil
		})
		t.Logf("first RUN line through the API server %v after the build started", time.Since(t0).Round(time.Millisecond))
		// The RUN waits for the file: the line came while the build ran.
		var sb string
		e.waitFor("the build's sandbox listed through API server 1", 30*time.Second, func() error {
			if sb = e.buildSandbox(ctx, t, 1, name); sb == "" {
				return errors.New("not listed")
			}
			return nil
		})
		buildNode, _ := session.NodeOf(sb)
		if _, err := e.client(1).Exec(ctx, sb, api.ExecRequest{Cmd: []string{"touch", "/tmp/release"}}); err != nil {
			t.Fatalf("release the RUN: %v", err)
		}
		var a buildAnswer
		select {
		case a = <-done:
		case <-ctx.Done():
			t.Fatal("the build did not end")
		}
		if a.err != nil {
			t.Fatalf("build through API server 0: %v\noutput:\n%s", a.err, out)
		}
		if a.res.Image.Name != name || a.res.LayerSteps == 0 {
			t.Errorf("result %+v", a.res)
		}
		t.Logf("built on %s in %.1fs: %d steps", buildNode, a.res.Millis/1000, len(a.res.Steps))

		// The environment is the cluster's: through the other API server, on
		// another node.
		other := "n1"
		if buildNode == "n1" {
			other = "n2"
		}
		img, err := e.client(1).Image(ctx, name)
		if err != nil || img.Name != name {
			t.Fatalf("image through API server 1: %+v %v", img, err)
		}
		created, err := e.client(1).Create(ctx, api.CreateSandboxRequest{Image: name, Node: other})
		if err != nil {
			t.Fatalf("create from the built image on %s through API server 1: %v", other, err)
		}
		if n, _ := session.NodeOf(created.ID); n != other {
			t.Errorf("created on %s, want %s", n, other)
		}
		res, err := e.client(1).Exec(ctx, created.ID, api.ExecRequest{Cmd: []string{"cat", "/built.txt"}})
		if err != nil || strings.TrimSpace(res.Stdout) != token {
			t.Errorf("the built file on %s: %+v %v, want %q", other, res, err, token)
		}
		if err := e.client(1).Delete(ctx, created.ID); err != nil {
			t.Errorf("delete: %v", err)
		}
	})

	t.Run("errors keep their codes through the API server", func(t *testing.T) {
		for _, c := range []struct {
			what, dockerfile string
			code             api.Code
			msg              []string
			stream           bool
		}{
			{"failing RUN, streamed", "FROM debian\nRUN echo about-to-fail-" + token + " && exit 3\n", api.CodeInvalidArgument,
				[]string{"Dockerfile line 2", "about-to-fail-" + token}, true},
			{"failing RUN, one answer", "FROM debian\nRUN echo about-to-fail-" + token + " && exit 3\n", api.CodeInvalidArgument,
				[]string{"Dockerfile line 2", "about-to-fail-" + token}, false},
			{"unknown FROM", "FROM no-such-image-" + token + "\nRUN true\n", api.CodeNotFound, []string{"no-such-image-" + token}, true},
		} {
			var out io.Writer
			var got *lines
			if c.stream {
				got = &lines{}
				out = got
			}
			t0 := time.Now()
			a := <-e.buildVia(ctx, t, 0, "e2e-fail-"+token, c.dockerfile, out)
			t.Logf("%s: %v after %v", c.what, a.err, time.Since(t0).Round(time.Millisecond))
			var ae *api.Error
			if !errors.As(a.err, &ae) || ae.Code != c.code {
				t.Errorf("%s: %v, want %s", c.what, a.err, c.code)
				continue
			}
			for _, m := range c.msg {
				if !strings.Contains(ae.Message, m) {
					t.Errorf("%s: message %q does not hold %q", c.what, ae.Message, m)
				}
			}
			if c.stream && c.code == api.CodeInvalidArgument && !got.has("about-to-fail-"+token) {
				t.Errorf("%s: the RUN's output was not streamed: %q", c.what, got)
			}
		}
	})

	t.Run("a client that goes away ends the node's build", func(t *testing.T) {
		bctx, stop := context.WithCancel(ctx)
		out := &lines{}
		gone := "e2e-gone-" + token
		done := e.buildVia(bctx, t, 0, gone, "FROM debian\nRUN echo waiting-"+token+" && while [ ! -e /tmp/never ]; do sleep 0.1; done\n", out)
		e.waitFor("the RUN's line", 3*time.Minute, func() error {
			if !out.has("waiting-" + token) {
				return errors.New("not yet")
			}
			return nil
		})
		sb := e.buildSandbox(ctx, t, 1, gone)
		if sb == "" {
			t.Fatal("the build's RUN sandbox is not listed while the RUN waits")
		}
		stop()
		if a := <-done; a.err == nil {
			t.Fatal("a build whose client went away answered no error")
		}
		t.Logf("client gone; the build's sandbox %s is to be deleted", sb)
		e.waitFor("the build's sandbox gone on its node", time.Minute, func() error {
			if id := e.buildSandbox(ctx, t, 1, gone); id != "" {
				return errors.New(id + " still there")
			}
			return nil
		})
	})

	t.Run("e2b template build through an API server", func(t *testing.T) {
		suite := e2bSuite(t)
		// Each SDK call goes to either API server: a template build's
		// record, logs and uploads are the cluster's.
		_, srv := newE2BProxy(e)
		defer srv.Close()
		nctx, ncancel := context.WithTimeout(ctx, 5*time.Minute)
		defer ncancel()
		cmd := exec.CommandContext(nctx, "node", "--test", "--test-concurrency=1", "--test-timeout=180000", "cluster-build.test.mjs")
		cmd.Dir = suite
		cmd.Env = append(os.Environ(), "E2B_API_URL="+srv.URL, "E2B_SANDBOX_URL="+srv.URL, "E2B_API_KEY=e2b_"+e.token)
		out, err := cmd.CombinedOutput()
		t.Logf("node --test output:\n%s", out)
		if err != nil {
			t.Fatalf("the E2B template build through an API server failed: %v", err)
		}
	})

	t.Run("an e2b template build whose API server dies ends as an error through the other", func(t *testing.T) {
		alias := "e2e-orphan-" + token
		status, _, body := e.raw(t, 0, "POST", "/v3/templates", map[string]any{"name": alias})
		var req struct{ BuildID string }
		if err := json.Unmarshal([]byte(body), &req); status != 202 || err != nil || req.BuildID == "" {
			t.Fatalf("request a template build through API server 0: %d %s", status, body)
		}
		spec := map[string]any{"fromTemplate": "debian", "steps": []map[string]any{
			{"type": "RUN", "args": []string{"echo orphan-line-" + token + "; sleep 600"}}}}
		if status, _, body := e.raw(t, 0, "POST", "/v2/templates/"+alias+"/builds/"+req.BuildID, spec); status != 202 {
			t.Fatalf("start it through API server 0: %d %s", status, body)
		}
		var st struct {
			Status     string
			LogEntries []struct{ Message string }
			Reason     *struct{ Message string }
		}
		poll := func() string {
			status, _, body := e.raw(t, 1, "GET", "/templates/"+alias+"/builds/"+req.BuildID+"/status?logsOffset=0", nil)
			if err := json.Unmarshal([]byte(body), &st); status != 200 || err != nil {
				t.Fatalf("status through API server 1: %d %s", status, body)
			}
			return body
		}
		e.waitFor("the RUN's output through API server 1", 3*time.Minute, func() error {
			if body := poll(); st.Status != "building" || !strings.Contains(body, "orphan-line-"+token) {
				return errors.New("not yet: " + body)
			}
			return nil
		})
		e.apis[0].stop(syscall.SIGKILL)
		defer e.startAPI(0)
		t0 := time.Now()
		e.waitFor("the build an error through API server 1", time.Minute, func() error {
			if body := poll(); st.Status != "error" {
				return errors.New("not yet: " + body)
			}
			return nil
		})
		if st.Reason == nil || !strings.Contains(st.Reason.Message, "stopped before the build ended") {
			t.Errorf("reason %+v", st.Reason)
		}
		t.Logf("the build of the killed API server an error through the other %v after the kill", time.Since(t0).Round(time.Millisecond))
	})

	t.Run("dsec image build through an API server prints the RUN output", func(t *testing.T) {
		dir := t.TempDir()
		df := "FROM debian\nRUN echo cli-line-" + token + "\n"
		if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644); err != nil {
			t.Fatal(err)
		}
		out := cli(t, e.bin, e.apiAddr[1], e.token, "image", "build", "-t", "e2e-cli-"+token, dir)
		line, built := strings.Index(out, "cli-line-"+token+"\n"), strings.Index(out, "built e2e-cli-"+token)
		if line < 0 || built < line {
			t.Errorf("dsec image build printed no RUN line before the summary:\n%s", out)
		}
	})

	t.Run("build caches pruned on every node", func(t *testing.T) {
		status, _, body := e.raw(t, 0, "POST", "/v1/images:prune", nil)
		if status != 200 {
			t.Fatalf("prune: %d %s", status, body)
		}
		if !strings.Contains(body, `"build_cache"`) {
			t.Errorf("prune through an API server answered no build cache: %s", body)
		}
	})
}
