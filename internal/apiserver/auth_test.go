package apiserver_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/apiserver"
	"github.com/dsec-dev/dsec/internal/app/apptest"
	"github.com/dsec-dev/dsec/internal/httpkit"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestListenerRefusesBadTokens: every authenticated route of an API server's
// listener (/v1, GET /metrics, SandboxFusion, the dashboard's API) refuses a
// request without a token and one with a wrong token with /v1's 401 body and
// challenge, and lets the cluster's token through.
func TestListenerRefusesBadTokens(t *testing.T) {
	_, cli := apptest.Etcd(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := apiserver.New(ctx, apiserver.Config{Etcd: cli, Secret: []byte(strings.Repeat("s", 40)), DataDir: dir,
		Name: "auth", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), QuotaReconcile: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
	tok, err := os.ReadFile(a.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()

	do := func(method, path, token string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(`{"code":"print(1)","language":"python"}`))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return resp, b
	}
	for _, rt := range []struct{ method, path string }{
		{"GET", "/v1/sandboxes"}, {"GET", apiserver.MetricsPath}, {"POST", "/run_code"}, {"POST", "/submit"},
		{"GET", "/ui/api/overview"},
	} {
		for _, bad := range []string{"", "wrong-token"} {
			resp, body := do(rt.method, rt.path, bad)
			var eb api.ErrorBody
			_ = json.Unmarshal(body, &eb)
			if resp.StatusCode != http.StatusUnauthorized || eb.Error == nil || eb.Error.Code != api.CodeUnauthorized ||
				eb.Error.Message != httpkit.UnauthorizedMessage || resp.Header.Get("WWW-Authenticate") != httpkit.Realm {
				t.Errorf("%s %s with token %q: %d %q (challenge %q), want 401 unauthorized %q",
					rt.method, rt.path, bad, resp.StatusCode, body, resp.Header.Get("WWW-Authenticate"), httpkit.UnauthorizedMessage)
			}
		}
		if resp, body := do(rt.method, rt.path, strings.TrimSpace(string(tok))); resp.StatusCode == http.StatusUnauthorized {
			t.Errorf("%s %s with the cluster token: refused: %s", rt.method, rt.path, body)
		}
	}
}
