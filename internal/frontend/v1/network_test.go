package v1_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/backend/driver/mock"
	v1 "github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/internal/frontend/v1/openapitest"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestNetworkDomains: PUT /v1/sandboxes/{id}/network takes domain rules
// (exact and wildcard) and reports them canonical; a malformed name or an
// IP address given as a name is 400 invalid_argument naming the field, and
// the policy stays as it was.
func TestNetworkDomains(t *testing.T) {
	node := agenttest.New(t, agenttest.Options{Driver: agenttest.MockWith(t, mock.Config{StateDir: t.TempDir(),
		BackendName: api.BackendContainer, Egress: true})})
	srv := httptest.NewServer(openapitest.Wrap(t, v1.New(session.Chain(node, session.Validating(nil)),
		v1.Options{Token: token, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}).Handler()))
	t.Cleanup(srv.Close)
	e := &env{t: t, srv: srv}
	sb := e.create()

	resp, b := e.do("PUT", "/v1/sandboxes/"+sb.ID+"/network",
		strings.NewReader(`{"allow":["198.18.0.0/15:443"],"allow_domains":["pypi.org","*.pythonhosted.org"],"deny_domains":["bad.example.com"]}`))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("set: %d %s", resp.StatusCode, b)
	}
	var got api.Sandbox
	mustJSON(t, b, &got)
	if n := got.Network; n == nil || !slices.Equal(n.AllowDomains, []string{"pypi.org", "*.pythonhosted.org"}) ||
		!slices.Equal(n.DenyDomains, []string{"bad.example.com"}) {
		t.Fatalf("network %+v, want the domains", got.Network)
	}
	for _, tc := range []struct{ body, field string }{
		{`{"allow_domains":["1.2.3.4"]}`, "allow_domains[0]"},
		{`{"allow_domains":["pypi.org","10.0.0.0/8"]}`, "allow_domains[1]"},
		{`{"allow_domains":["pypi..org"]}`, "allow_domains[0]"},
		{`{"allow_domains":["a.*.example.com"]}`, "allow_domains[0]"},
		{`{"allow_domains":["localhost"]}`, "allow_domains[0]"},
		{`{"deny_domains":["-x.example.com"]}`, "deny_domains[0]"},
	} {
		resp, b := e.do("PUT", "/v1/sandboxes/"+sb.ID+"/network", strings.NewReader(tc.body))
		if er := wantError(t, resp, b, http.StatusBadRequest, api.CodeInvalidArgument); !strings.Contains(er.Message, tc.field) {
			t.Errorf("%s: message %q does not name %s", tc.body, er.Message, tc.field)
		}
	}
	resp, b = e.do("GET", "/v1/sandboxes/"+sb.ID, nil)
	mustJSON(t, b, &got)
	if resp.StatusCode != http.StatusOK || got.Network == nil || !slices.Equal(got.Network.AllowDomains, []string{"pypi.org", "*.pythonhosted.org"}) {
		t.Fatalf("after refused changes: %d %+v", resp.StatusCode, got.Network)
	}
}
