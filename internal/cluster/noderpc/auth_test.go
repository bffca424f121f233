package noderpc_test

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/cluster/noderpc"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// A client with a wrong secret, no secret or a skewed clock is refused with
// unauthorized on every kind of call, and nothing reaches the service.
func TestWrongSecretRunsNothing(t *testing.T) {
	f := &fakeService{}
	n := serve(t, f, noderpc.HandlerOptions{})
	for name, mod := range map[string]func(*noderpc.ClientOptions){
		"wrong secret": func(o *noderpc.ClientOptions) { o.Secret = []byte("another-cluster-secret-xxxxxx") },
		"no secret":    func(o *noderpc.ClientOptions) { o.Secret = nil },
		"old token":    func(o *noderpc.ClientOptions) { o.Now = func() time.Time { return time.Now().Add(-10 * time.Minute) } },
	} {
		t.Run(name, func(t *testing.T) {
			c := n.client(t, mod)
			ctx := ctxT(t)
			t0 := time.Now()
			_, err := c.Get(ctx, "sb-1")
			wantCode(t, "Get", err, api.CodeUnauthorized)
			_, err = c.ExecStream(ctx, "sb-1", api.ExecRequest{Cmd: []string{"true"}}, session.Stream{Stdin: strings.NewReader("x")})
			wantCode(t, "ExecStream", err, api.CodeUnauthorized)
			_, err = c.Dial(ctx, "sb-1", 80)
			wantCode(t, "Dial", err, api.CodeUnauthorized)
			_, err = c.ProcessLogs(ctx, "sb-1", "p1", "stdout", 0)
			wantCode(t, "ProcessLogs", err, api.CodeUnauthorized)
			_, err = c.FS(ctx, "sb-1")
			wantCode(t, "FS", err, api.CodeUnauthorized)
			_, err = c.NodeStatus(ctx)
			wantCode(t, "NodeStatus", err, api.CodeUnauthorized)
			if d := time.Since(t0); d > 5*time.Second {
				t.Errorf("refusals took %v", d)
			}
		})
	}
	// A request without any token, as a plain HTTP client would send it.
	resp, err := http.Post(n.url+"/dsec.noderpc.v1.Node/Call", "application/json", bytes.NewReader([]byte(`{"method":"Get"}`)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("request without a token: HTTP %d, want 401", resp.StatusCode)
	}
	if got := f.calls.Load(); got != 0 {
		t.Errorf("%d refused calls reached the service", got)
	}
	// The right secret works.
	if _, err := n.client(t, nil).Get(ctxT(t), "sb-1"); err != nil || f.calls.Load() != 1 {
		t.Errorf("with the right secret: %v, %d calls", err, f.calls.Load())
	}
}

func TestLoadSecret(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "  s3cr3t-s3cr3t-s3cr3t-s3cr3t\n", 0o600)
	if s, err := noderpc.LoadSecret(good); err != nil || string(s) != "s3cr3t-s3cr3t-s3cr3t-s3cr3t" {
		t.Errorf("LoadSecret(good) = %q, %v", s, err)
	}
	for name, tc := range map[string]struct {
		path string
		want string
	}{
		"empty":          {write("empty", " \n", 0o600), "empty"},
		"world-readable": {write("world", "s3cr3t-s3cr3t-s3cr3t-s3cr3t", 0o644), "chmod 600"},
		"short":          {write("short", "abc", 0o600), "at least"},
		"missing":        {filepath.Join(dir, "nope"), "no such file"},
		"directory":      {dir, "not a regular file"},
	} {
		if _, err := noderpc.LoadSecret(tc.path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: LoadSecret = %v, want an error saying %q", name, err, tc.want)
		}
	}
}
