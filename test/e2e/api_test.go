package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

func (n *node) raw(t *testing.T, method, path, token string, body io.Reader) (int, api.Error) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+n.addr+path, body)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb api.ErrorBody
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &eb)
	if eb.Error == nil {
		return resp.StatusCode, api.Error{}
	}
	return resp.StatusCode, *eb.Error
}

func TestAPIErrors(t *testing.T) {
	n := startNode(t)
	id := n.create(t, api.CreateSandboxRequest{})
	cases := []struct {
		name, method, path, token string
		body                      io.Reader
		status                    int
		code                      api.Code
	}{
		{"no token", "GET", "/v1/sandboxes", "", nil, 401, api.CodeUnauthorized},
		{"wrong token", "GET", "/v1/sandboxes", "nope", nil, 401, api.CodeUnauthorized},
		{"unknown sandbox", "GET", "/v1/sandboxes/sb-0000000000000000", n.token, nil, 404, api.CodeNotFound},
		{"exec in unknown sandbox", "POST", "/v1/sandboxes/sb-0000000000000000/exec", n.token, strings.NewReader(`{"cmd":["true"]}`), 404, api.CodeNotFound},
		{"malformed json", "POST", "/v1/sandboxes", n.token, strings.NewReader(`{"cpu":`), 400, api.CodeInvalidArgument},
		{"unknown field", "POST", "/v1/sandboxes", n.token, strings.NewReader(`{"cpus":1}`), 400, api.CodeInvalidArgument},
		{"negative memory", "POST", "/v1/sandboxes", n.token, strings.NewReader(`{"memory_bytes":-1}`), 400, api.CodeInvalidArgument},
		{"unknown image", "POST", "/v1/sandboxes", n.token, strings.NewReader(`{"image":"no-such-image"}`), 404, api.CodeNotFound},
		{"oversized body", "POST", "/v1/sandboxes/" + id + "/exec", n.token, bytes.NewReader(append(append([]byte(`{"cmd":["true"],"stdin":"`), bytes.Repeat([]byte("a"), 2<<20)...), '"', '}')), 413, api.CodePayloadTooLarge},
		{"exec without command", "POST", "/v1/sandboxes/" + id + "/exec", n.token, strings.NewReader(`{}`), 400, api.CodeInvalidArgument},
		{"bad port", "GET", "/v1/sandboxes/" + id + "/http/99999/", n.token, nil, 400, api.CodeInvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, e := n.raw(t, c.method, c.path, c.token, c.body)
			if status != c.status || e.Code != c.code || e.Message == "" {
				t.Fatalf("got %d %+v, want %d %s", status, e, c.status, c.code)
			}
		})
	}
	// None of that disturbed the sandbox.
	if r := n.sh(t, id, "echo ok"); strings.TrimSpace(r.Stdout) != "ok" {
		t.Fatalf("sandbox disturbed: %+v", r)
	}
	if status, _ := n.raw(t, "GET", "/v1/health", "", nil); status != 200 {
		t.Fatalf("health: %d", status)
	}
	if status, _ := n.raw(t, "GET", "/v1/openapi.yaml", n.token, nil); status != 200 {
		t.Fatalf("openapi: %d", status)
	}
}

func TestIdempotentCreate(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	req := api.CreateSandboxRequest{RequestID: "rollout-42-agent-7"}
	type res struct {
		id  string
		err error
	}
	ch := make(chan res, 4)
	for i := 0; i < 4; i++ {
		go func() {
			sb, err := n.cl.Create(ctx, req)
			ch <- res{sb.ID, err}
		}()
	}
	var first string
	for i := 0; i < 4; i++ {
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		if first == "" {
			first = r.id
		} else if r.id != first {
			t.Fatalf("same request id gave %s and %s", first, r.id)
		}
	}
	t.Cleanup(func() { _ = n.cl.Delete(ctx, first) })
	if sbs, _ := n.cl.List(ctx); len(sbs) != 1 {
		t.Fatalf("%d sandboxes for one request id", len(sbs))
	}
}

func TestSessionFeatures(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	id := n.create(t, api.CreateSandboxRequest{Env: map[string]string{"GREETING": "hi"}})

	t.Run("exec options", func(t *testing.T) {
		r, err := n.cl.Exec(ctx, id, api.ExecRequest{Cmd: []string{"sh", "-c", "echo $GREETING $EXTRA; pwd; id -u; cat; echo err >&2; exit 3"},
			Env: map[string]string{"EXTRA": "there"}, Cwd: "/tmp", User: "nobody", Stdin: "from-stdin\n"})
		if err != nil {
			t.Fatal(err)
		}
		if r.ExitCode != 3 || r.Stdout != "hi there\n/tmp\n65534\nfrom-stdin\n" || r.Stderr != "err\n" || r.DurationMs <= 0 {
			t.Fatalf("%+v", r)
		}
		r, _ = n.cl.Exec(ctx, id, api.ExecRequest{Shell: "head -c 3000 /dev/zero | tr '\\0' x", MaxOutputBytes: 1000})
		if len(r.Stdout) != 1000 || !r.StdoutTruncated {
			t.Fatalf("truncation: %d %v", len(r.Stdout), r.StdoutTruncated)
		}
		r, _ = n.cl.Exec(ctx, id, api.ExecRequest{Cmd: []string{"no-such-command"}})
		if r.ExitCode != 127 || r.Error == "" {
			t.Fatalf("missing command: %+v", r)
		}
		r, _ = n.cl.Exec(ctx, id, api.ExecRequest{Shell: "kill -TERM $$"})
		if r.Signal != "SIGTERM" || r.ExitCode != -1 {
			t.Fatalf("signal: %+v", r)
		}
	})
	t.Run("streaming exec with stdin", func(t *testing.T) {
		var out, errb bytes.Buffer
		r, err := n.cl.ExecStream(ctx, id, api.ExecRequest{Shell: "while read l; do echo got:$l; done; echo bye >&2"},
			strings.NewReader("a\nb\n"), &out, &errb)
		if err != nil {
			t.Fatal(err)
		}
		if out.String() != "got:a\ngot:b\n" || errb.String() != "bye\n" || r.ExitCode != 0 {
			t.Fatalf("stream: %q %q %+v", out.String(), errb.String(), r)
		}
	})
	t.Run("http into the sandbox", func(t *testing.T) {
		n.sh(t, id, "mkdir -p /srv && echo page > /srv/index.html")
		if _, err := n.cl.StartProcess(ctx, id, api.ExecRequest{Cmd: []string{"python3", "-m", "http.server", "8080", "-d", "/srv"}}); err != nil {
			t.Fatal(err)
		}
		var body string
		for i := 0; i < 100 && body != "page\n"; i++ {
			resp, err := n.cl.HTTP(ctx, id, 8080, "GET", "/index.html", nil, nil)
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				body = string(b)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if body != "page\n" {
			t.Fatalf("proxied body %q", body)
		}
	})
	t.Run("pause and resume", func(t *testing.T) {
		if _, err := n.cl.Pause(ctx, id); err != nil {
			t.Fatal(err)
		}
		sb, _ := n.cl.Get(ctx, id)
		if sb.State != api.StatePaused {
			t.Fatalf("state %s", sb.State)
		}
		if _, err := n.cl.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}}); !isCode(err, api.CodeConflict) {
			t.Fatalf("exec while paused: %v", err)
		}
		if _, err := n.cl.Resume(ctx, id); err != nil {
			t.Fatal(err)
		}
		if r := n.sh(t, id, "echo back"); strings.TrimSpace(r.Stdout) != "back" {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("reset gives a fresh writable layer", func(t *testing.T) {
		n.sh(t, id, "echo x > /root/scratch")
		if _, err := n.cl.Reset(ctx, id); err != nil {
			t.Fatal(err)
		}
		if r := n.sh(t, id, "ls /root/scratch 2>&1; echo $GREETING"); !strings.Contains(r.Stdout, "No such file") || !strings.Contains(r.Stdout, "hi") {
			t.Fatalf("after reset: %q", r.Stdout)
		}
	})
	t.Run("ttl expiry", func(t *testing.T) {
		sb, err := n.cl.Create(ctx, api.CreateSandboxRequest{TTLSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		testwait.For(t, 10*time.Second, "the sandbox removed at the end of its TTL", func() bool {
			_, err := n.cl.Get(ctx, sb.ID)
			return isCode(err, api.CodeNotFound)
		})
	})
}
