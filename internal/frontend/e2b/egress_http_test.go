package e2b_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/frontend/e2b"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestCreateInternetAccess: create's allow_internet_access and network
// options reach the node as its egress policy (internet by default, as E2B's
// SDK assumes; loopback only with false), the detail reports what was asked,
// and options dsec cannot enforce are refused before anything is created.
func TestCreateInternetAccess(t *testing.T) {
	e := newEnv(t)
	policy := func(id string) *api.NetworkStatus {
		sb, err := e.n.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		return sb.Network
	}
	detail := func(id string) map[string]any {
		res, b := e.call("GET", "/sandboxes/"+id, nil)
		var d map[string]any
		if err := json.Unmarshal(b, &d); err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("detail: %d %s", res.StatusCode, b)
		}
		return d
	}

	def := e.create(nil)
	if p := policy(def.SandboxID); p == nil || !slices.Equal(p.Allow, []string{"0.0.0.0/0"}) {
		t.Errorf("default create: policy %+v, want internet (0.0.0.0/0)", p)
	}
	if v, ok := detail(def.SandboxID)["allowInternetAccess"]; ok {
		t.Errorf("default create: detail says allowInternetAccess %v, want it absent (not asked)", v)
	}

	off := e.create(map[string]any{"templateID": "base", "allow_internet_access": false})
	if p := policy(off.SandboxID); p != nil {
		t.Errorf("allow_internet_access false: policy %+v, want none (loopback only)", p)
	}
	if v := detail(off.SandboxID)["allowInternetAccess"]; v != false {
		t.Errorf("allow_internet_access false: detail says %v", v)
	}

	some := e.create(map[string]any{"templateID": "base", "network": map[string]any{
		"denyOut": []string{"0.0.0.0/0"}, "allowOut": []string{"198.18.7.2"}}})
	if p := policy(some.SandboxID); p == nil || !slices.Equal(p.Allow, []string{"198.18.7.2/32"}) {
		t.Errorf("deny all, allow one: policy %+v", p)
	}

	named := e.create(map[string]any{"templateID": "base", "network": map[string]any{
		"denyOut": []string{"0.0.0.0/0", "Bad.Example.com"}, "allowOut": []string{"pypi.org", "*.pythonhosted.org"}}})
	if p := policy(named.SandboxID); p == nil || len(p.Allow) != 0 || !slices.Equal(p.AllowDomains, []string{"pypi.org", "*.pythonhosted.org"}) ||
		!slices.Equal(p.DenyDomains, []string{"bad.example.com"}) {
		t.Errorf("domains only: policy %+v", p)
	}

	// The SDK's updateNetwork replaces the policy; omitted fields are cleared.
	res, b := e.call("PUT", "/sandboxes/"+off.SandboxID+"/network", map[string]any{"allowOut": []string{"198.18.7.0/24"}})
	if p := policy(off.SandboxID); res.StatusCode != http.StatusNoContent || p == nil || !slices.Contains(p.Allow, "198.18.7.0/24") || !slices.Contains(p.Allow, "0.0.0.0/0") {
		t.Errorf("update to internet and a range: %d %s, policy %+v", res.StatusCode, b, p)
	}
	res, b = e.call("PUT", "/sandboxes/"+off.SandboxID+"/network", map[string]any{"allow_internet_access": false})
	if p := policy(off.SandboxID); res.StatusCode != http.StatusNoContent || p == nil || len(p.Allow) != 0 {
		t.Errorf("update to no internet: %d %s, policy %+v", res.StatusCode, b, p)
	}
	if res, b := e.call("PUT", "/sandboxes/sb-nope/network", map[string]any{}); res.StatusCode != http.StatusNotFound {
		t.Errorf("update of an unknown sandbox: %d %s", res.StatusCode, b)
	}

	before := e.count()

	for _, body := range []map[string]any{
		{"templateID": "base", "network": map[string]any{"allowOut": []string{"pypi..org"}}},
		{"templateID": "base", "network": map[string]any{"allowOut": []string{"*.pypi.*"}}},
		{"templateID": "base", "network": map[string]any{"denyOut": []string{"8.8.8.8/99"}}},
		{"templateID": "base", "network": map[string]any{"egressProxy": map[string]any{"address": "p:1080"}}},
	} {
		res, b := e.call("POST", "/v2/sandboxes", body)
		var er struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal(b, &er); err != nil || res.StatusCode != http.StatusBadRequest || er.Code != 400 || !strings.Contains(er.Message, "network.") {
			t.Errorf("%v: %d %s, want 400 naming the field", body["network"], res.StatusCode, b)
		}
	}
	after := e.count()
	if after != before {
		t.Errorf("refused creates made %d sandboxes", after-before)
	}
}

// TestCreateInternetAccessWithoutEgress: on a node that offers no egress (the
// mock driver has no network policy), internet access asked for explicitly
// is refused with the node's reason, and the default gives loopback only.
func TestCreateInternetAccessWithoutEgress(t *testing.T) {
	h := e2b.New(agenttest.New(t, agenttest.Options{}), e2b.Options{Authorize: func(k string) bool { return k == testKey }, Secret: []byte("test")})
	post := func(body string) (int, string) {
		req, _ := http.NewRequest("POST", "/v2/sandboxes", strings.NewReader(body))
		req.Header.Set("X-API-Key", testKey)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	if code, body := post(`{"templateID":"tiny","allow_internet_access":true}`); code != http.StatusNotImplemented || !strings.Contains(body, "network") {
		t.Errorf("explicit internet access: %d %s, want 501 naming the network policy", code, body)
	}
	if code, body := post(`{"templateID":"tiny"}`); code != http.StatusCreated {
		t.Errorf("default create: %d %s", code, body)
	}
}
