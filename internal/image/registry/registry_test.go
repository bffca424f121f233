package registry

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
)

func TestHostsTomlOrderAndServer(t *testing.T) {
	dir := t.TempDir()
	write := func(host, body string) {
		if err := os.MkdirAll(filepath.Join(dir, host), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, host, "hosts.toml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docker.io", `server = "https://registry-1.docker.io"

[host."http://mirror-b:5000"]
  capabilities = ["pull"]

[host."https://mirror-a"]
  capabilities = ["pull", "resolve"]

[host."https://push-only"]
  capabilities = ["push"]
`)
	write("_default", `[host."https://fallback"]`)
	h := &hostsDir{dir: dir}
	reg, _ := name.NewRegistry("docker.io")
	eps, err := h.endpoints(reg)
	if err != nil {
		t.Fatal(err)
	}
	want := []endpoint{{host: "mirror-b:5000", insecure: true}, {host: "mirror-a", resolve: true}, {host: "registry-1.docker.io", resolve: true}}
	if len(eps) != len(want) {
		t.Fatalf("endpoints %+v, want %+v", eps, want)
	}
	for i := range want {
		if eps[i] != want[i] {
			t.Fatalf("endpoint %d: %+v, want %+v", i, eps[i], want[i])
		}
	}
	other, _ := name.NewRegistry("quay.io")
	eps, err = h.endpoints(other)
	if err != nil || len(eps) != 2 || eps[0].host != "fallback" || eps[1].host != "quay.io" {
		t.Fatalf("_default: %+v %v", eps, err)
	}
	write("bad.example", `[host."https://m/prefix"]`)
	bad, _ := name.NewRegistry("bad.example")
	if _, err := h.endpoints(bad); err == nil {
		t.Fatal("a path prefix was accepted")
	}
}

func TestKeychainFromDockerConfig(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.json")
	// "dXNlcjpwYXNz" is user:pass.
	if err := os.WriteFile(p, []byte(`{"auths":{"https://index.docker.io/v1/":{"auth":"dXNlcjpwYXNz"},"ghcr.io":{"username":"u2","password":"p2"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := loadKeychain(p)
	if err != nil {
		t.Fatal(err)
	}
	for reg, want := range map[string]authn.AuthConfig{
		"docker.io": {Username: "user", Password: "pass"},
		"ghcr.io":   {Username: "u2", Password: "p2"},
		"quay.io":   {},
	} {
		r, _ := name.NewRegistry(reg)
		a, err := k.Resolve(r)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := a.Authorization()
		if got.Username != want.Username || got.Password != want.Password {
			t.Errorf("%s: %+v, want %+v", reg, got, want)
		}
	}
	if _, err := loadKeychain(filepath.Join(t.TempDir(), "missing.json")); err != nil {
		t.Fatalf("a missing config: %v, want anonymous", err)
	}
}

func TestRetryHonoursRetryAfter(t *testing.T) {
	var n atomic.Int32
	var first, second time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1:
			first = time.Now()
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		case 2:
			second = time.Now()
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	defer srv.Close()
	cfg := Config{Retries: 3, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Second}
	rt := &retryTransport{inner: http.DefaultTransport, cfg: &cfg}
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	resp, err := rt.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%v %v", resp, err)
	}
	resp.Body.Close()
	if n.Load() != 3 {
		t.Fatalf("%d requests, want 3", n.Load())
	}
	if d := second.Sub(first); d < 900*time.Millisecond {
		t.Fatalf("retried after %v, Retry-After said 1s", d)
	}
	// Out of retries: the last answer is returned.
	n.Store(0)
	cfg.Retries = 1
	resp, err = rt.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("out of retries: %v %v", resp, err)
	}
	resp.Body.Close()
}

func TestPlainHTTPOnlyForInsecure(t *testing.T) {
	g := &schemeGuard{inner: http.DefaultTransport, insecure: func(h string) bool { return h == "ok:1" }}
	req, _ := http.NewRequest(http.MethodGet, "http://other:1/v2/", nil)
	if _, err := g.RoundTrip(req); err == nil {
		t.Fatal("plain HTTP to a registry not configured insecure was sent")
	}
}
