package e2b_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/frontend/e2b"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// snapEnv is a node (the mock driver, which has neither fork nor commit)
// behind two E2B handlers, as two API servers: calls alternate between them,
// so whatever one answers must not depend on what the other kept.
type snapEnv struct {
	t    *testing.T
	node *agenttest.Node
	srvs []*httptest.Server
	next int
}

func newSnapEnv(t *testing.T, wrap ...session.Interceptor) *snapEnv {
	t.Helper()
	n := agenttest.NewNode(t)
	svc := session.Chain(n, wrap...)
	e := &snapEnv{t: t, node: n}
	for range 2 {
		h := e2b.New(svc, e2b.Options{Authorize: func(k string) bool { return k == testKey }, Secret: []byte("test")})
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		e.srvs = append(e.srvs, srv)
	}
	return e
}

// call makes a control-plane call through the next API server.
func (e *snapEnv) call(method, path string, body any) (int, []byte) {
	e.t.Helper()
	srv := e.srvs[e.next%len(e.srvs)]
	e.next++
	var rd io.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, srv.URL+path, rd)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", "e2b_"+testKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

func (e *snapEnv) create() string {
	e.t.Helper()
	st, b := e.call("POST", "/v2/sandboxes", map[string]any{"templateID": "base", "timeout": 600})
	if st != http.StatusCreated {
		e.t.Fatalf("create: %d %s", st, b)
	}
	var c struct{ SandboxID string }
	if err := json.Unmarshal(b, &c); err != nil {
		e.t.Fatal(err)
	}
	return c.SandboxID
}

func (e *snapEnv) sandboxes() []string {
	e.t.Helper()
	list, err := e.node.List(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	var ids []string
	for _, sb := range list {
		ids = append(ids, sb.ID)
	}
	slices.Sort(ids)
	return ids
}

// wantAPIError checks an answer is E2B's {code, message} with status want
// and a message that contains each of subs.
func wantAPIError(t *testing.T, what string, st int, b []byte, want int, subs ...string) {
	t.Helper()
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(b, &e); err != nil || st != want || e.Code != want || e.Message == "" {
		t.Fatalf("%s: got %d %s, want %d {code, message}", what, st, b, want)
	}
	for _, s := range subs {
		if !strings.Contains(e.Message, s) {
			t.Fatalf("%s: message %q does not say %q", what, e.Message, s)
		}
	}
}

type snapInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

// TestSnapshotForkRefusedWithoutCapability: on a backend without commit and
// fork (the mock), createSnapshot and fork answer 501 in E2B's shape, naming
// the sandbox, and nothing is made: no snapshot, no sandbox.
func TestSnapshotForkRefusedWithoutCapability(t *testing.T) {
	e := newSnapEnv(t)
	id := e.create()
	st, b := e.call("POST", "/sandboxes/"+id+"/snapshots", map[string]any{})
	wantAPIError(t, "snapshot on the mock", st, b, http.StatusNotImplemented, id, "commit")
	st, b = e.call("POST", "/sandboxes/"+id+"/fork", map[string]any{"count": 2})
	wantAPIError(t, "fork on the mock", st, b, http.StatusNotImplemented, id, "fork")
	st, b = e.call("GET", "/snapshots", nil)
	if st != http.StatusOK || strings.TrimSpace(string(b)) != "[]" {
		t.Fatalf("snapshots after refusals: %d %s", st, b)
	}
	if got := e.sandboxes(); !slices.Equal(got, []string{id}) {
		t.Fatalf("sandboxes after refusals: %v", got)
	}
}

// TestSnapshotForkBadInput: a fork count of 0, a negative one, one over the
// node's maximum, a negative timeout, a sandbox or snapshot that does not
// exist, a malformed name: E2B-shaped errors, and nothing changes.
func TestSnapshotForkBadInput(t *testing.T) {
	e := newSnapEnv(t)
	id := e.create()
	for _, c := range []struct {
		what, method, path string
		body               any
		status             int
		says               string
	}{
		{"fork count 0", "POST", "/sandboxes/" + id + "/fork", map[string]any{"count": 0}, 400, "count"},
		{"fork count -3", "POST", "/sandboxes/" + id + "/fork", map[string]any{"count": -3}, 400, "count"},
		{"fork count over the maximum", "POST", "/sandboxes/" + id + "/fork", map[string]any{"count": 65}, 400, "max-fork"},
		{"fork negative timeout", "POST", "/sandboxes/" + id + "/fork", map[string]any{"timeout": -1}, 400, "timeout"},
		{"fork unknown sandbox", "POST", "/sandboxes/sb-0123456789abcdef.mock-node/fork", nil, 404, "not found"},
		{"fork malformed body", "POST", "/sandboxes/" + id + "/fork", "{", 400, "JSON"},
		{"snapshot unknown sandbox", "POST", "/sandboxes/sb-0123456789abcdef.mock-node/snapshots", map[string]any{}, 404, "not found"},
		{"snapshot bad name", "POST", "/sandboxes/" + id + "/snapshots", map[string]any{"name": "Has Spaces"}, 400, "snapshot name"},
		{"snapshot name too long", "POST", "/sandboxes/" + id + "/snapshots", map[string]any{"name": strings.Repeat("a", 39)}, 400, "snapshot name"},
		{"delete unknown snapshot", "DELETE", "/templates/e2b-snap-0123456789abcdef-00000000", nil, 404, "not found"},
		{"delete a template that is no snapshot", "DELETE", "/templates/base", nil, 404, "other images are removed with dsec image rm"},
		{"list limit 0", "GET", "/snapshots?limit=0", nil, 400, "limit"},
		{"create from unknown snapshot", "POST", "/v2/sandboxes", map[string]any{"templateID": "e2b-snap-0123456789abcdef-00000000"}, 404, "e2b-snap-0123456789abcdef-00000000"},
	} {
		var st int
		var b []byte
		if s, ok := c.body.(string); ok {
			st, b = e.rawCall(c.method, c.path, s)
		} else {
			st, b = e.call(c.method, c.path, c.body)
		}
		wantAPIError(t, c.what, st, b, c.status, c.says)
	}
	if got := e.sandboxes(); !slices.Equal(got, []string{id}) {
		t.Fatalf("sandboxes after bad input: %v", got)
	}
}

// rawCall is call with a body sent as it is.
func (e *snapEnv) rawCall(method, path, body string) (int, []byte) {
	e.t.Helper()
	srv := e.srvs[e.next%len(e.srvs)]
	e.next++
	req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	req.Header.Set("X-API-Key", "e2b_"+testKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// fakeStore stands in for a node with commit and fork: a commit adds an
// environment to its list (in use while a sandbox created from it exists),
// a fork creates the children on the mock. It is the node's state, shared
// by both API servers.
type fakeStore struct {
	mu      sync.Mutex
	envs    map[string]api.CommitRequest
	commits []string // the sandboxes committed, in order
	forks   []api.ForkRequest
}

func (f *fakeStore) interceptor() session.Interceptor {
	return func(next session.Service) session.Service { return fakeSnap{next, f} }
}

type fakeSnap struct {
	session.Service
	f *fakeStore
}

func (s fakeSnap) Commit(ctx context.Context, id string, req api.CommitRequest) (api.CommitResult, error) {
	if _, err := s.Get(ctx, id); err != nil {
		return api.CommitResult{}, err
	}
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	if _, ok := s.f.envs[req.Name]; ok {
		return api.CommitResult{}, errdefs.New(api.CodeAlreadyExists, "environment %q already exists", req.Name)
	}
	s.f.envs[req.Name] = req
	s.f.commits = append(s.f.commits, id)
	return api.CommitResult{Image: api.Image{Name: req.Name}}, nil
}

func (s fakeSnap) Images(ctx context.Context) ([]api.Image, error) {
	imgs, err := s.Service.Images(ctx)
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	for _, n := range slices.Sorted(maps.Keys(s.f.envs)) {
		imgs = append(imgs, api.Image{Name: n, Kind: "layered"})
	}
	return imgs, err
}

func (s fakeSnap) RemoveImage(ctx context.Context, name string) error {
	list, err := s.List(ctx)
	if err != nil {
		return err
	}
	for _, sb := range list {
		if sb.Labels["from-env"] == name {
			return errdefs.Conflict("environment %q is used by sandbox %s", name, sb.ID)
		}
	}
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	if _, ok := s.f.envs[name]; !ok {
		return errdefs.NotFound("environment %q not found", name)
	}
	delete(s.f.envs, name)
	return nil
}

// Create from a committed environment creates from the default image and
// marks the sandbox as the environment's user.
func (s fakeSnap) Create(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	s.f.mu.Lock()
	_, ok := s.f.envs[req.Image]
	s.f.mu.Unlock()
	if ok {
		req.Labels = maps.Clone(req.Labels)
		req.Labels["from-env"] = req.Image
		req.Image = ""
	}
	return s.Service.Create(ctx, req)
}

func (s fakeSnap) Fork(ctx context.Context, id string, req api.ForkRequest) (api.ForkResult, error) {
	p, err := s.Get(ctx, id)
	if err != nil {
		return api.ForkResult{}, err
	}
	s.f.mu.Lock()
	s.f.forks = append(s.f.forks, req)
	s.f.mu.Unlock()
	labels := maps.Clone(p.Labels)
	maps.Copy(labels, req.Overrides.Labels)
	res := api.ForkResult{Parent: id}
	for range req.Count {
		c, err := s.Service.Create(ctx, api.CreateSandboxRequest{Labels: labels, TTLSeconds: req.Overrides.TTLSeconds})
		if err != nil {
			return api.ForkResult{}, err
		}
		res.Children = append(res.Children, c)
	}
	return res, nil
}

// TestSnapshots: createSnapshot (named and not), list (all, by sandbox, by
// name, in pages), create from a snapshot, and delete (204, 404 the second
// time, 409 while a sandbox runs on it), through two API servers in turn.
func TestSnapshots(t *testing.T) {
	f := &fakeStore{envs: map[string]api.CommitRequest{}}
	e := newSnapEnv(t, f.interceptor())
	a, b := e.create(), e.create()

	snap := func(id string, body map[string]any) snapInfo {
		t.Helper()
		st, out := e.call("POST", "/sandboxes/"+id+"/snapshots", body)
		if st != http.StatusCreated {
			t.Fatalf("snapshot of %s: %d %s", id, st, out)
		}
		return decode[snapInfo](t, out)
	}
	list := func(q string) ([]string, string) {
		t.Helper()
		srv := e.srvs[e.next%2]
		e.next++
		req, _ := http.NewRequest("GET", srv.URL+"/snapshots"+q, nil)
		req.Header.Set("X-API-Key", testKey)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		out, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("list %s: %d %s", q, res.StatusCode, out)
		}
		var ids []string
		for _, s := range decode[[]snapInfo](t, out) {
			ids = append(ids, s.SnapshotID)
		}
		slices.Sort(ids)
		return ids, res.Header.Get(e2b.NextTokenHeader)
	}

	s1 := snap(a, map[string]any{})
	s2 := snap(a, map[string]any{"name": "my-snap"})
	s3 := snap(b, nil)
	if len(s1.Names) != 0 || !slices.Equal(s2.Names, []string{"my-snap"}) || s1.SnapshotID == s3.SnapshotID {
		t.Fatalf("snapshots %+v %+v %+v", s1, s2, s3)
	}
	// What was committed: the sandbox asked for, everything but /run.
	if !slices.Equal(f.commits, []string{a, a, b}) {
		t.Fatalf("committed %v", f.commits)
	}
	if req := f.envs[s1.SnapshotID]; !req.NoDefaultExclude || !slices.Equal(req.Exclude, []string{"/run"}) {
		t.Fatalf("commit request %+v", req)
	}
	st, out := e.call("POST", "/sandboxes/"+a+"/snapshots", map[string]any{"name": "my-snap"})
	wantAPIError(t, "the same name again", st, out, http.StatusConflict, "my-snap")

	all := []string{s1.SnapshotID, s2.SnapshotID, s3.SnapshotID}
	slices.Sort(all)
	if got, _ := list(""); !slices.Equal(got, all) {
		t.Fatalf("all snapshots %v, want %v", got, all)
	}
	ofA := []string{s1.SnapshotID, s2.SnapshotID}
	slices.Sort(ofA)
	if got, _ := list("?sandboxID=" + a); !slices.Equal(got, ofA) {
		t.Fatalf("snapshots of %s: %v, want %v", a, got, ofA)
	}
	for _, q := range []string{"my-snap", "team/my-snap:default", s2.SnapshotID} {
		if got, _ := list("?name=" + q); !slices.Equal(got, []string{s2.SnapshotID}) {
			t.Fatalf("snapshots named %q: %v", q, got)
		}
	}
	if got, _ := list("?name=my-snap-does-not-exist"); len(got) != 0 {
		t.Fatalf("unknown name lists %v", got)
	}
	// Pages of 2: the token of the first page leads to the last one.
	p1, tok := list("?limit=2")
	if len(p1) != 2 || tok == "" {
		t.Fatalf("first page %v, token %q", p1, tok)
	}
	p2, tok2 := list("?limit=2&nextToken=" + tok)
	if got := slices.Sorted(slices.Values(append(p1, p2...))); !slices.Equal(got, all) || tok2 != "" {
		t.Fatalf("pages %v %v (token %q), want %v", p1, p2, tok2, all)
	}

	// A sandbox from a snapshot is created by its ID, as from a template.
	st, out = e.call("POST", "/v2/sandboxes", map[string]any{"templateID": s1.SnapshotID})
	if st != http.StatusCreated {
		t.Fatalf("create from snapshot: %d %s", st, out)
	}
	child := decode[created](t, out)
	if child.TemplateID != s1.SnapshotID {
		t.Fatalf("created from a snapshot: %+v", child)
	}
	// In use: refused, and kept.
	st, out = e.call("DELETE", "/templates/"+s1.SnapshotID, nil)
	wantAPIError(t, "delete in use", st, out, http.StatusConflict, "in use")
	if got, _ := list("?name=" + s1.SnapshotID); len(got) != 1 {
		t.Fatalf("snapshot gone after a refused delete: %v", got)
	}
	if st, out := e.call("DELETE", "/sandboxes/"+child.SandboxID, nil); st != http.StatusNoContent {
		t.Fatalf("kill: %d %s", st, out)
	}
	if st, out := e.call("DELETE", "/templates/"+s1.SnapshotID, nil); st != http.StatusNoContent {
		t.Fatalf("delete: %d %s", st, out)
	}
	st, out = e.call("DELETE", "/templates/"+s1.SnapshotID, nil)
	wantAPIError(t, "delete again", st, out, http.StatusNotFound, "not found")
	if got, _ := list(""); len(got) != 2 || slices.Contains(got, s1.SnapshotID) {
		t.Fatalf("after delete: %v", got)
	}
}

// TestFork: fork answers one entry per child, each a sandbox as create
// answers it (with its envd token and domain), with the timeout asked for
// (the parent's creation timeout when none is), through either API server.
func TestFork(t *testing.T) {
	f := &fakeStore{envs: map[string]api.CommitRequest{}}
	e := newSnapEnv(t, f.interceptor())
	parent := e.create()
	type result struct {
		Sandbox *struct {
			SandboxID       string  `json:"sandboxID"`
			TemplateID      string  `json:"templateID"`
			EnvdAccessToken string  `json:"envdAccessToken"`
			Domain          *string `json:"domain"`
		} `json:"sandbox"`
		Error *struct{ Code int } `json:"error"`
	}
	fork := func(body any) []result {
		t.Helper()
		st, out := e.call("POST", "/sandboxes/"+parent+"/fork", body)
		if st != http.StatusCreated {
			t.Fatalf("fork %v: %d %s", body, st, out)
		}
		return decode[[]result](t, out)
	}
	check := func(rs []result, n int, ttl time.Duration) {
		t.Helper()
		if len(rs) != n {
			t.Fatalf("%d results, want %d", len(rs), n)
		}
		for _, r := range rs {
			if r.Error != nil || r.Sandbox == nil || r.Sandbox.SandboxID == parent || r.Sandbox.EnvdAccessToken == "" ||
				r.Sandbox.Domain == nil || r.Sandbox.TemplateID != "base" {
				t.Fatalf("fork result %+v", r)
			}
			sb, err := e.node.Get(context.Background(), r.Sandbox.SandboxID)
			if err != nil {
				t.Fatal(err)
			}
			if sb.ExpiresAt == nil || time.Until(*sb.ExpiresAt) > ttl || time.Until(*sb.ExpiresAt) < ttl-time.Minute {
				t.Fatalf("child %s expires at %v, want in %v", sb.ID, sb.ExpiresAt, ttl)
			}
		}
	}
	check(fork(nil), 1, 600*time.Second)
	check(fork(map[string]any{"count": 3, "timeout": 120}), 3, 120*time.Second)
	if len(f.forks) != 2 || f.forks[0].Count != 1 || f.forks[1].Count != 3 {
		t.Fatalf("forks asked of the node: %+v", f.forks)
	}
	if n := len(e.sandboxes()); n != 5 {
		t.Fatalf("%d sandboxes, want the parent and 4 children", n)
	}
}

// fsPauseNode stands in for a node with a filesystem-only pause: it records
// the pause requests and pauses the mock sandbox, a resume of it is a boot.
type fsPauseNode struct {
	session.Service
	mu      sync.Mutex
	asks    []api.PauseRequest
	expires []string // OnExpiry of each create
}

// Create records what the sandbox does at its deadline and creates it on the
// mock, which pauses with memory only.
func (n *fsPauseNode) Create(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	n.mu.Lock()
	n.expires = append(n.expires, req.OnExpiry)
	n.mu.Unlock()
	if req.OnExpiry == api.ExpiryPauseFilesystem {
		req.OnExpiry = api.ExpiryPause
	}
	return n.Service.Create(ctx, req)
}

func (n *fsPauseNode) PauseWith(ctx context.Context, id string, req api.PauseRequest) (api.PauseResponse, error) {
	n.mu.Lock()
	n.asks = append(n.asks, req)
	n.mu.Unlock()
	sb, err := n.Pause(ctx, id)
	return api.PauseResponse{Sandbox: sb}, err
}

// TestFilesystemPause: a pause with memory false asks the node for a
// filesystem-only pause and the sandbox is paused (its deadline dropped); a
// pause with memory asks for the freeze as before; connect resumes it.
func TestFilesystemPause(t *testing.T) {
	fn := &fsPauseNode{}
	e := newSnapEnv(t, func(next session.Service) session.Service { fn.Service = next; return fn })
	id := e.create()
	if st, b := e.call("POST", "/sandboxes/"+id+"/pause", map[string]any{"memory": false}); st != http.StatusNoContent {
		t.Fatalf("pause without memory: %d %s", st, b)
	}
	if len(fn.asks) != 1 || fn.asks[0].Memory == nil || *fn.asks[0].Memory {
		t.Fatalf("pauses asked of the node: %+v", fn.asks)
	}
	sb, err := e.node.Get(context.Background(), id)
	if err != nil || sb.State != api.StatePaused || sb.ExpiresAt != nil {
		t.Fatalf("after a pause without memory: %+v %v", sb, err)
	}
	if st, b := e.call("POST", "/sandboxes/"+id+"/connect", map[string]any{"timeout": 60}); st != http.StatusCreated && st != http.StatusOK {
		t.Fatalf("connect: %d %s", st, b)
	}
	if st, b := e.call("POST", "/sandboxes/"+id+"/pause", map[string]any{"memory": true}); st != http.StatusNoContent {
		t.Fatalf("pause with memory: %d %s", st, b)
	}
	if len(fn.asks) != 1 {
		t.Fatalf("a pause with memory went to the filesystem-only pause: %+v", fn.asks)
	}
	if st, b := e.call("POST", "/v2/sandboxes", map[string]any{"templateID": "base", "autoPause": true, "autoPauseMemory": false}); st != http.StatusCreated {
		t.Fatalf("create with autoPauseMemory false: %d %s", st, b)
	}
	if st, b := e.call("POST", "/v2/sandboxes", map[string]any{"templateID": "base", "autoPause": true}); st != http.StatusCreated {
		t.Fatalf("create with autoPause: %d %s", st, b)
	}
	// Each create is asked twice of the mock: with the default internet
	// access, then (the mock has no egress) without.
	if want := []string{api.ExpiryDelete, api.ExpiryPauseFilesystem, api.ExpiryPause}; !slices.Equal(slices.Compact(fn.expires), want) {
		t.Fatalf("on_expiry asked of the node: %q, want %q", fn.expires, want)
	}
}

// TestFilesystemPauseRefused: on a backend without a filesystem-only pause
// (the mock) a pause with memory false is answered 501 naming the backend
// and the sandbox runs on; a create asking for one at the deadline
// (autoPauseMemory false) is refused the same way and no sandbox is made.
func TestFilesystemPauseRefused(t *testing.T) {
	e := newSnapEnv(t)
	id := e.create()
	st, b := e.call("POST", "/sandboxes/"+id+"/pause", map[string]any{"memory": false})
	wantAPIError(t, "pause without memory", st, b, http.StatusNotImplemented, `backend "container"`, "pause without memory")
	if sb, err := e.node.Get(context.Background(), id); err != nil || sb.State != api.StateRunning {
		t.Fatalf("after a refused pause: %+v %v", sb, err)
	}
	st, b = e.call("POST", "/v2/sandboxes", map[string]any{"templateID": "base", "autoPause": true, "autoPauseMemory": false})
	wantAPIError(t, "create with autoPauseMemory false", st, b, http.StatusNotImplemented, `backend "container"`, "pause without memory")
	if got := e.sandboxes(); !slices.Equal(got, []string{id}) {
		t.Fatalf("sandboxes after a refused create: %v", got)
	}
	if st, b := e.call("POST", "/v2/sandboxes", map[string]any{"templateID": "base", "autoPause": true, "autoPauseMemory": true}); st != http.StatusCreated {
		t.Fatalf("create with autoPauseMemory true: %d %s", st, b)
	}
	if st, b := e.call("POST", "/sandboxes/"+id+"/pause", map[string]any{"memory": true}); st != http.StatusNoContent {
		t.Fatalf("pause with memory: %d %s", st, b)
	}
	if sb, err := e.node.Get(context.Background(), id); err != nil || sb.State != api.StatePaused {
		t.Fatalf("after a pause: %+v %v", sb, err)
	}
}
