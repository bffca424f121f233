package e2b_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/frontend/e2b"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

type apiErr struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// checkErr asserts an error answer: status and {code, message} with code equal to it.
func checkErr(t *testing.T, res *http.Response, b []byte, status int) {
	t.Helper()
	if res.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", res.StatusCode, status, b)
	}
	e := decode[apiErr](t, b)
	if e.Code != status || e.Message == "" {
		t.Fatalf("error body %s: want code %d and a message", b, status)
	}
}

type detail struct {
	SandboxID       string            `json:"sandboxID"`
	TemplateID      string            `json:"templateID"`
	State           string            `json:"state"`
	Metadata        map[string]string `json:"metadata"`
	StartedAt       time.Time         `json:"startedAt"`
	EndAt           time.Time         `json:"endAt"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken"`
	CPUCount        int               `json:"cpuCount"`
	MemoryMB        int               `json:"memoryMB"`
	Lifecycle       *struct {
		OnTimeout  string `json:"onTimeout"`
		AutoResume bool   `json:"autoResume"`
	} `json:"lifecycle"`
}

func TestCreateBothEndpoints(t *testing.T) {
	e := newEnv(t)
	for _, p := range []string{"/v2/sandboxes", "/sandboxes"} {
		res, b := e.call("POST", p, map[string]any{"templateID": "base", "metadata": map[string]string{"user": "a b"}, "envVars": map[string]string{"X": "1"}, "unknownField": true})
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("%s: %d %s", p, res.StatusCode, b)
		}
		c := decode[created](t, b)
		if c.SandboxID == "" || c.TemplateID != "base" || c.EnvdVersion != e2b.EnvdVersion || c.EnvdAccessToken == "" || c.ClientID == "" {
			t.Fatalf("%s: %s", p, b)
		}
		sb, _ := e.n.Get(t.Context(), c.SandboxID)
		if sb.Image != "debian" || sb.Env["X"] != "1" || sb.Labels["user"] != "a b" {
			t.Fatalf("session got %+v", sb)
		}
	}
	if e2b.EnvdVersion < "0.4.0" {
		t.Fatal("envdVersion below the 0.4.0 gate")
	}
}

func TestCreateTemplateNamesImage(t *testing.T) {
	e := newEnv(t)
	c := e.create(map[string]any{"templateID": "judge"})
	sb, _ := e.n.Get(t.Context(), c.SandboxID)
	if sb.Image != "judge" || c.TemplateID != "judge" {
		t.Fatalf("image %q template %q", sb.Image, c.TemplateID)
	}
	res, b := e.call("POST", "/v2/sandboxes", map[string]any{"templateID": "missing"})
	checkErr(t, res, b, http.StatusNotFound)
}

func TestCreateBadInput(t *testing.T) {
	e := newEnv(t)
	for name, body := range map[string]any{
		"malformed JSON":   "{",
		"no template":      map[string]any{},
		"negative timeout": map[string]any{"templateID": "base", "timeout": -1},
		"reserved label":   map[string]any{"templateID": "base", "metadata": map[string]string{"dsec.e2b/timeout": "1"}},
		"volumes":          map[string]any{"templateID": "base", "volumeMounts": []map[string]string{{"name": "v", "path": "/v"}}},
		"resume w/o pause": map[string]any{"templateID": "base", "autoResume": map[string]bool{"enabled": true}},
		"wrong type":       map[string]any{"templateID": 5},
	} {
		res, b := e.call("POST", "/v2/sandboxes", body)
		if res.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d %s", name, res.StatusCode, b)
			continue
		}
		checkErr(t, res, b, http.StatusBadRequest)
	}
	big := `{"templateID":"base","metadata":{"k":"` + strings.Repeat("x", 2<<20) + `"}}`
	res, b := e.call("POST", "/v2/sandboxes", big)
	checkErr(t, res, b, http.StatusRequestEntityTooLarge)
	if all, _ := e.n.List(t.Context()); len(all) != 0 {
		t.Fatalf("bad creates made %d sandboxes", len(all))
	}
	e.create(nil) // nothing else disturbed
}

func TestAuth(t *testing.T) {
	e := newEnv(t)
	for _, hdr := range [][]string{{"X-API-Key", ""}, {"X-API-Key", "e2b_wrong"}, {"X-API-Key", "wrong"}} {
		res, b := e.call("GET", "/v2/sandboxes", nil, hdr...)
		checkErr(t, res, b, http.StatusUnauthorized)
	}
	for _, hdr := range [][]string{{"X-API-Key", testKey}, {"X-API-Key", "e2b_" + testKey}, {"X-API-Key", "", "Authorization", "Bearer " + testKey}} {
		if res, b := e.call("GET", "/v2/sandboxes", nil, hdr...); res.StatusCode != http.StatusOK {
			t.Fatalf("%v: %d %s", hdr, res.StatusCode, b)
		}
	}
	// Nil Authorize refuses everything.
	e2 := newEnv(t, func(o *e2b.Options) { o.Authorize = nil })
	res, b := e2.call("POST", "/v2/sandboxes", map[string]any{"templateID": "base"})
	checkErr(t, res, b, http.StatusUnauthorized)
}

func TestGetMetadataRoundTripAndKill(t *testing.T) {
	e := newEnv(t)
	md := map[string]string{"user": "alice", "run": "7", "weird key=&": "v&=x"}
	c := e.create(map[string]any{"templateID": "base", "metadata": md, "timeout": 60})
	res, b := e.call("GET", "/sandboxes/"+c.SandboxID, nil)
	if res.StatusCode != 200 {
		t.Fatalf("%d %s", res.StatusCode, b)
	}
	d := decode[detail](t, b)
	if len(d.Metadata) != len(md) || d.Metadata["weird key=&"] != "v&=x" || d.Metadata["user"] != "alice" {
		t.Fatalf("metadata %v, want %v", d.Metadata, md)
	}
	if d.State != "running" || d.EnvdAccessToken != c.EnvdAccessToken || d.Lifecycle == nil || d.Lifecycle.OnTimeout != "kill" || d.CPUCount != 1 || d.MemoryMB != 512 {
		t.Fatalf("detail %s", b)
	}
	if left := time.Until(d.EndAt); left < 50*time.Second || left > 61*time.Second {
		t.Fatalf("endAt %v from now, want ~60s", left)
	}
	res, b = e.call("DELETE", "/sandboxes/"+c.SandboxID, nil)
	if res.StatusCode != http.StatusNoContent {
		t.Fatalf("kill %d %s", res.StatusCode, b)
	}
	res, b = e.call("DELETE", "/sandboxes/"+c.SandboxID, nil)
	checkErr(t, res, b, http.StatusNotFound)
	res, b = e.call("GET", "/sandboxes/"+c.SandboxID, nil)
	checkErr(t, res, b, http.StatusNotFound)
	res, b = e.call("GET", "/sandboxes/nope/metrics", nil)
	checkErr(t, res, b, http.StatusNotFound)
	res, b = e.call("GET", "/templates", nil)
	checkErr(t, res, b, http.StatusNotFound)
}

func TestListFiltersAndPaging(t *testing.T) {
	e := newEnv(t)
	var ids []string
	for i := range 5 {
		md := map[string]string{"group": "a"}
		if i%2 == 1 {
			md["group"] = "b c"
		}
		ids = append(ids, e.create(map[string]any{"templateID": "base", "metadata": md}).SandboxID)
	}
	if res, b := e.call("POST", "/sandboxes/"+ids[0]+"/pause", nil); res.StatusCode != 204 {
		t.Fatalf("pause %d %s", res.StatusCode, b)
	}
	list := func(q url.Values) ([]detail, string) {
		res, b := e.call("GET", "/v2/sandboxes?"+q.Encode(), nil)
		if res.StatusCode != 200 {
			t.Fatalf("list %v: %d %s", q, res.StatusCode, b)
		}
		return decode[[]detail](t, b), res.Header.Get(e2b.NextTokenHeader)
	}
	all, next := list(url.Values{})
	if len(all) != 5 || next != "" {
		t.Fatalf("all: %d, next %q", len(all), next)
	}
	if all[0].SandboxID != ids[4] { // newest first
		t.Fatalf("order: first %s, want %s", all[0].SandboxID, ids[4])
	}
	// The SDK double-encodes metadata: encodeURIComponent on each side, then a query string.
	mq := url.Values{}
	mq.Set(url.QueryEscape("group"), url.QueryEscape("b c"))
	got, _ := list(url.Values{"metadata": {mq.Encode()}})
	if len(got) != 2 {
		t.Fatalf("metadata filter: %d", len(got))
	}
	got, _ = list(url.Values{"state": {"paused"}})
	if len(got) != 1 || got[0].SandboxID != ids[0] || got[0].State != "paused" {
		t.Fatalf("paused: %+v", got)
	}
	got, _ = list(url.Values{"state": {"running,paused"}})
	if len(got) != 5 {
		t.Fatalf("both states: %d", len(got))
	}
	got, _ = list(url.Values{"state": {"running"}, "metadata": {"group=a"}})
	if len(got) != 2 {
		t.Fatalf("running a: %d", len(got))
	}
	// Paging: 2 at a time, in either order, covers all five once.
	for _, order := range []string{"asc", "desc"} {
		seen := map[string]bool{}
		tok := ""
		for pages := 0; ; pages++ {
			q := url.Values{"limit": {"2"}, "order": {order}}
			if tok != "" {
				q.Set("nextToken", tok)
			}
			page, next := list(q)
			for _, d := range page {
				if seen[d.SandboxID] {
					t.Fatalf("%s: %s twice", order, d.SandboxID)
				}
				seen[d.SandboxID] = true
			}
			if next == "" {
				if pages != 2 {
					t.Fatalf("%s: %d pages", order, pages+1)
				}
				break
			}
			tok = next
		}
		if len(seen) != 5 {
			t.Fatalf("%s: paged %d", order, len(seen))
		}
	}
	// Legacy GET /sandboxes lists running ones.
	res, b := e.call("GET", "/sandboxes", nil)
	if res.StatusCode != 200 || len(decode[[]detail](t, b)) != 4 {
		t.Fatalf("legacy list %d %s", res.StatusCode, b)
	}
	for _, q := range []string{"state=dead", "limit=0", "limit=x", "nextToken=!!!", "nextToken=bm9jb2xvbg", "order=up", "startedAfter=yesterday"} {
		res, b := e.call("GET", "/v2/sandboxes?"+q, nil)
		checkErr(t, res, b, http.StatusBadRequest)
	}
}

func TestTimeoutKills(t *testing.T) {
	e := newEnv(t)
	c := e.create(map[string]any{"templateID": "base", "timeout": 1})
	keep := e.create(map[string]any{"templateID": "base", "timeout": 1})
	if res, b := e.call("POST", "/sandboxes/"+keep.SandboxID+"/timeout", map[string]any{"timeout": 30}); res.StatusCode != 204 {
		t.Fatalf("set timeout %d %s", res.StatusCode, b)
	}
	waitFor(t, 5*time.Second, func() bool { _, err := e.n.Get(t.Context(), c.SandboxID); return err != nil })
	if _, err := e.n.Get(t.Context(), keep.SandboxID); err != nil {
		t.Fatal("setTimeout did not extend the deadline")
	}
	res, b := e.call("POST", "/sandboxes/"+c.SandboxID+"/timeout", map[string]any{"timeout": 30})
	checkErr(t, res, b, http.StatusNotFound)
	res, b = e.call("POST", "/sandboxes/"+keep.SandboxID+"/timeout", map[string]any{})
	checkErr(t, res, b, http.StatusBadRequest)
}

func TestTimeoutPausesAndConnectResumes(t *testing.T) {
	e := newEnv(t)
	c := e.create(map[string]any{"templateID": "base", "timeout": 1, "autoPause": true})
	waitFor(t, 5*time.Second, func() bool { sb, _ := e.n.Get(t.Context(), c.SandboxID); return sb.State == api.StatePaused })
	res, b := e.call("GET", "/sandboxes/"+c.SandboxID, nil)
	if d := decode[detail](t, b); d.State != "paused" || d.Lifecycle.OnTimeout != "pause" {
		t.Fatalf("%d %s", res.StatusCode, b)
	}
	res, b = e.call("POST", "/sandboxes/"+c.SandboxID+"/pause", nil)
	checkErr(t, res, b, http.StatusConflict)
	res, b = e.call("POST", "/v2/sandboxes/"+c.SandboxID+"/connect", map[string]any{"timeout": 60})
	if res.StatusCode != http.StatusCreated || decode[created](t, b).EnvdAccessToken != c.EnvdAccessToken {
		t.Fatalf("connect paused: %d %s", res.StatusCode, b)
	}
	res, b = e.call("POST", "/v2/sandboxes/"+c.SandboxID+"/connect", map[string]any{"timeout": 5})
	if res.StatusCode != http.StatusOK {
		t.Fatalf("connect running: %d %s", res.StatusCode, b)
	}
	_, b = e.call("GET", "/sandboxes/"+c.SandboxID, nil)
	if left := time.Until(decode[detail](t, b).EndAt); left < 50*time.Second {
		t.Fatalf("connect shortened the deadline to %v", left)
	}
	res, b = e.call("POST", "/sandboxes/"+c.SandboxID+"/resume", map[string]any{})
	checkErr(t, res, b, http.StatusConflict)
	res, b = e.call("POST", "/v2/sandboxes/nope/connect", map[string]any{})
	checkErr(t, res, b, http.StatusNotFound)
	res, b = e.call("POST", "/sandboxes/"+c.SandboxID+"/connect", map[string]any{})
	checkErr(t, res, b, http.StatusBadRequest) // v1 connect needs a timeout
}

func TestPauseResumeLegacy(t *testing.T) {
	e := newEnv(t)
	c := e.create(nil)
	if res, b := e.call("POST", "/sandboxes/"+c.SandboxID+"/pause", map[string]any{"memory": true}); res.StatusCode != 204 {
		t.Fatalf("%d %s", res.StatusCode, b)
	}
	res, b := e.call("POST", "/sandboxes/"+c.SandboxID+"/resume", map[string]any{"timeout": 60, "memory": false})
	checkErr(t, res, b, http.StatusBadRequest)
	if res, b := e.call("POST", "/sandboxes/"+c.SandboxID+"/resume", map[string]any{"timeout": 60}); res.StatusCode != 201 {
		t.Fatalf("%d %s", res.StatusCode, b)
	}
	if res, b := e.call("POST", "/sandboxes/"+c.SandboxID+"/refreshes", map[string]any{"duration": 10}); res.StatusCode != 204 {
		t.Fatalf("%d %s", res.StatusCode, b)
	}
}

// A sandbox's deadline is the service's, not the front end's: a setTimeout
// through one front end holds after another one that set the first deadline
// went away, and the sandboxes still end at their deadlines.
func TestDeadlinesOutliveTheFrontEnd(t *testing.T) {
	e := newEnv(t)
	c := e.create(map[string]any{"templateID": "base", "timeout": 1})
	keep := e.create(map[string]any{"templateID": "base", "timeout": 1})
	h2 := e2b.New(e.n, e2b.Options{Authorize: func(k string) bool { return k == testKey }})
	srv2 := httptest.NewServer(h2)
	defer func() { srv2.Close(); h2.Close() }()
	other := &env{t: t, n: e.n, h: h2, srv: srv2}
	if res, b := other.call("POST", "/sandboxes/"+keep.SandboxID+"/timeout", map[string]any{"timeout": 30}); res.StatusCode != 204 {
		t.Fatalf("set timeout through the second front end: %d %s", res.StatusCode, b)
	}
	e.srv.Close()
	e.h.Close() // the front end that created them goes away
	waitFor(t, 5*time.Second, func() bool { _, err := e.n.Get(t.Context(), c.SandboxID); return err != nil })
	if _, err := e.n.Get(t.Context(), keep.SandboxID); err != nil {
		t.Fatal("the second front end's setTimeout did not hold")
	}
	_, b := other.call("GET", "/sandboxes/"+keep.SandboxID, nil)
	if left := time.Until(decode[detail](t, b).EndAt); left < 20*time.Second || left > 31*time.Second {
		t.Fatalf("endAt %v from now, want ~30s", left)
	}
}

func waitFor(t *testing.T, d time.Duration, ok func() bool) {
	t.Helper()
	testwait.For(t, d, "condition", ok)
}

func TestOwnsAndMount(t *testing.T) {
	h := e2b.New(agenttest.NewNode(t), e2b.Options{})
	defer h.Close()
	v1 := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(299) })
	m := e2b.Mount(v1, h)
	for path, hdr := range map[string]string{
		"/v2/sandboxes": "", "/sandboxes/x/pause": "", "/health": "", "/files": "",
		"/process.Process/Start": "", "/v1/sandboxes": "sb-1", "/anything": "sb-1",
	} {
		r := httptest.NewRequest("GET", path, nil)
		if hdr != "" {
			r.Header.Set(e2b.SandboxIDHeader, hdr)
		}
		w := httptest.NewRecorder()
		m.ServeHTTP(w, r)
		if w.Code == 299 {
			t.Errorf("%s (sandbox %q) went to /v1", path, hdr)
		}
	}
	for _, path := range []string{"/v1/sandboxes", "/v1/health", "/run_code", "/sandboxesX"} {
		w := httptest.NewRecorder()
		m.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		if w.Code != 299 {
			t.Errorf("%s did not go to /v1: %d", path, w.Code)
		}
	}
}

// A sandbox created through /v1 keeps living without a deadline when E2B code
// connects to it without asking for one.
func TestConnectV1SandboxKeepsNoDeadline(t *testing.T) {
	e := newEnv(t)
	sb, _ := e.n.Create(t.Context(), api.CreateSandboxRequest{})
	res, b := e.call("POST", "/v2/sandboxes/"+sb.ID+"/connect", map[string]any{})
	if res.StatusCode != 200 {
		t.Fatalf("%d %s", res.StatusCode, b)
	}
	_, b = e.call("GET", "/sandboxes/"+sb.ID, nil)
	if d := decode[detail](t, b); d.EndAt.Year() != 9999 || d.TemplateID != "debian" {
		t.Fatalf("a /v1 sandbox got a deadline: %s", b)
	}
	e.call("POST", "/v2/sandboxes/"+sb.ID+"/connect", map[string]any{"timeout": 1})
	waitFor(t, 5*time.Second, func() bool { _, err := e.n.Get(t.Context(), sb.ID); return err != nil })
}
