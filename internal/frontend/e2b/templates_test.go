package e2b_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/frontend/e2b"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/buildstate"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// fakeBuilds is a node whose Dockerfile builds are recorded: a build whose
// Dockerfile has "exit 7" fails as a failing RUN does; any other writes an
// environment with the Dockerfile's labels (over those of its FROM
// environment, when that is one of the node's). Creates of those
// environments run on the node's default image. Builds of a template's tag
// (an environment "name..tag") are counted in tagBuilds, not recorded.
type fakeBuilds struct {
	session.Service
	mu         sync.Mutex
	images     map[string]api.Image
	dockerfile string
	files      map[string]string // context path: contents
	creates    []api.CreateSandboxRequest
	busy       map[string]bool // images a sandbox runs on (RemoveImage refuses them)
	tagBuilds  int
	// release ends the builds whose Dockerfile holds "block-until-released"
	// (closed, or one receive per build), which write "blocked-build" to
	// their output first.
	release chan struct{}
}

var labelRE = regexp.MustCompile(`(dev\.dsec\.e2b\.[a-z-]+)="((?:[^"\\]|\\.)*)"`)

func (f *fakeBuilds) BuildImage(ctx context.Context, req api.BuildImageRequest, r io.Reader) (api.BuildImageResult, error) {
	files := map[string]string{}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return api.BuildImageResult{}, err
		}
		b, _ := io.ReadAll(tr)
		files[hdr.Name] = string(b)
	}
	df := files["Dockerfile"]
	if strings.Contains(df, "block-until-released") {
		_, _ = io.WriteString(req.Output, "blocked-build\n")
		select {
		case <-f.release:
		case <-ctx.Done():
			return api.BuildImageResult{}, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if strings.Contains(req.Name, "..") {
		f.tagBuilds++
	} else {
		f.dockerfile, f.files = df, files
	}
	if strings.Contains(df, "exit 7") {
		return api.BuildImageResult{}, errdefs.Invalid("Dockerfile line 2: RUN [\"/bin/sh\",\"-c\",\"echo out; exit 7\"] exited with code 7:\nthe output")
	}
	if strings.HasPrefix(df, "FROM nope\n") {
		return api.BuildImageResult{}, errdefs.NotFound("Dockerfile line 1: FROM nope: image \"nope\" not found")
	}
	labels := map[string]string{}
	from, _, _ := strings.Cut(strings.TrimPrefix(df, "FROM "), "\n")
	if base, ok := f.images[from]; ok && base.Config != nil {
		maps.Copy(labels, base.Config.Labels)
	}
	for _, m := range labelRE.FindAllStringSubmatch(df, -1) {
		labels[m[1]] = strings.NewReplacer(`\"`, `"`, `\$`, `$`, `\\`, `\`).Replace(m[2])
	}
	img := api.Image{Name: req.Name, Kind: "layered", Config: &api.ImageConfig{Labels: labels}}
	f.images[req.Name] = img
	return api.BuildImageResult{Image: img, Steps: []api.BuildStep{{Line: 2, Instruction: "RUN", Millis: 3}}, LayerSteps: 1}, nil
}

func (f *fakeBuilds) Images(ctx context.Context) ([]api.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []api.Image{{Name: "busybox", Default: true}}
	for _, img := range f.images {
		out = append(out, img)
	}
	return out, nil
}

func (f *fakeBuilds) Image(ctx context.Context, name string) (api.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if img, ok := f.images[name]; ok {
		return img, nil
	}
	return api.Image{}, errdefs.NotFound("image %q not found", name)
}

func (f *fakeBuilds) RemoveImage(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.images[name]; !ok {
		return errdefs.NotFound("image %q not found", name)
	}
	if f.busy[name] {
		return errdefs.Conflict("image %q is in use by 1 sandbox", name)
	}
	delete(f.images, name)
	return nil
}

func (f *fakeBuilds) Create(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	f.mu.Lock()
	f.creates = append(f.creates, req)
	f.mu.Unlock()
	req.Image, req.StartCmd, req.ReadyCmd = "", "", ""
	return f.Service.Create(ctx, req)
}

type tplEnv struct {
	*env
	fake *fakeBuilds
}

func newTplEnv(t *testing.T) *tplEnv {
	t.Helper()
	fake := &fakeBuilds{Service: agenttest.NewRootedNode(t), busy: map[string]bool{}, images: map[string]api.Image{
		"plain": {Name: "plain", Kind: "layered"}, // a dsec environment, not a template
	}, release: make(chan struct{})}
	return fake.frontEnd(t, nil)
}

// frontEnd is another E2B front end over f's node, keeping its template
// builds in builds (nil: its own memory).
func (f *fakeBuilds) frontEnd(t *testing.T, builds buildstate.Store) *tplEnv {
	h := e2b.New(f, e2b.Options{Authorize: func(k string) bool { return k == testKey }, Secret: []byte("test"), Builds: builds})
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); h.Close() })
	return &tplEnv{env: &env{t: t, h: h, srv: srv}, fake: f}
}

// requestBuild is POST /v3/templates.
func (e *tplEnv) requestBuild(name string) (templateID, buildID string) {
	e.t.Helper()
	res, b := e.call("POST", "/v3/templates", map[string]any{"name": name, "cpuCount": 2})
	if res.StatusCode != http.StatusAccepted {
		e.t.Fatalf("request build: %d %s", res.StatusCode, b)
	}
	var out struct{ TemplateID, BuildID string }
	_ = json.Unmarshal(b, &out)
	return out.TemplateID, out.BuildID
}

// status polls the build until it is no longer building.
func (e *tplEnv) status(id, build string) (st struct {
	Status     string
	LogEntries []struct{ Level, Message string }
	Reason     *struct {
		Message string
		Step    *string
	}
}) {
	e.t.Helper()
	testwait.For(e.t, 10*time.Second, "the build ends", func() bool {
		res, b := e.call("GET", "/templates/"+id+"/builds/"+build+"/status?logsOffset=0", nil)
		if res.StatusCode != http.StatusOK {
			e.t.Fatalf("status: %d %s", res.StatusCode, b)
		}
		if err := json.Unmarshal(b, &st); err != nil {
			e.t.Fatal(err)
		}
		return st.Status != "building" && st.Status != "waiting"
	})
	return st
}

func gzTar(t *testing.T, files map[string]string) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(tw, body)
	}
	_ = tw.Close()
	_ = zw.Close()
	return buf.Bytes()
}

func TestTemplateBuildFlow(t *testing.T) {
	e := newTplEnv(t)
	id, build := e.requestBuild("my-tpl:v1")
	if id != "my-tpl" || build == "" {
		t.Fatalf("template %q build %q", id, build)
	}

	// Upload: a signed link, usable without the API key; then present.
	res, b := e.call("GET", "/templates/my-tpl/files/hash1", nil)
	var link struct {
		Present bool
		URL     string `json:"url"`
	}
	_ = json.Unmarshal(b, &link)
	if res.StatusCode != http.StatusCreated || link.Present || !strings.HasPrefix(link.URL, e.srv.URL+"/templates/my-tpl/files/hash1?") {
		t.Fatalf("upload link: %d %s", res.StatusCode, b)
	}
	put := func(u string) int {
		req, _ := http.NewRequest("PUT", u, bytes.NewReader(gzTar(t, map[string]string{"hello.txt": "hi\n"})))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if code := put(strings.Replace(link.URL, "token=", "token=0", 1)); code != http.StatusUnauthorized {
		t.Errorf("PUT with a bad token: %d, want 401", code)
	}
	if code := put(strings.Replace(link.URL, "hash1", "hash2", 1)); code != http.StatusUnauthorized {
		t.Errorf("PUT of another hash with the link's token: %d, want 401", code)
	}
	if code := put(link.URL); code != http.StatusOK {
		t.Fatalf("PUT: %d", code)
	}
	if _, b := e.call("GET", "/templates/my-tpl/files/hash1", nil); !strings.Contains(string(b), `"present":true`) {
		t.Errorf("after upload: %s", b)
	}

	spec := map[string]any{
		"fromTemplate": "base",
		"startCmd":     "sleep 100",
		"readyCmd":     "test -f /tmp/x",
		"steps": []map[string]any{
			{"type": "RUN", "args": []string{"echo hi"}},
			{"type": "COPY", "args": []string{"hello.txt", "/app/", "", ""}, "filesHash": "hash1"},
			{"type": "ENV", "args": []string{"K", "v"}},
		},
	}
	if res, b := e.call("POST", "/v2/templates/my-tpl/builds/"+build, spec); res.StatusCode != http.StatusAccepted {
		t.Fatalf("start build: %d %s", res.StatusCode, b)
	}
	if res, _ := e.call("POST", "/v2/templates/my-tpl/builds/"+build, spec); res.StatusCode != http.StatusConflict {
		t.Errorf("second start: %d, want 409", res.StatusCode)
	}
	st := e.status("my-tpl", build)
	if st.Status != "ready" || len(st.LogEntries) == 0 {
		t.Fatalf("status %+v", st)
	}
	if !strings.Contains(st.LogEntries[1].Message, `[1] runCmd("echo hi")`) {
		t.Errorf("log %+v", st.LogEntries)
	}
	// The logs already read are not sent again.
	if _, b := e.call("GET", fmt.Sprintf("/templates/my-tpl/builds/%s/status?logsOffset=%d", build, len(st.LogEntries)), nil); !strings.Contains(string(b), `"logEntries":[]`) {
		t.Errorf("past the end: %s", b)
	}
	e.fake.mu.Lock()
	df, files := e.fake.dockerfile, e.fake.files
	e.fake.mu.Unlock()
	if !strings.HasPrefix(df, "FROM busybox\n") || !strings.Contains(df, `COPY ["files/hash1/hello.txt","/app/"]`) {
		t.Errorf("Dockerfile:\n%s", df)
	}
	if files["files/hash1/hello.txt"] != "hi\n" {
		t.Errorf("context: %v", files)
	}

	if _, b := e.call("GET", "/templates/aliases/my-tpl", nil); !strings.Contains(string(b), `"templateID":"my-tpl"`) {
		t.Errorf("alias: %s", b)
	}
	if res, _ := e.call("GET", "/templates/aliases/other", nil); res.StatusCode != http.StatusNotFound {
		t.Errorf("unknown alias: %d", res.StatusCode)
	}
	for _, a := range []string{"base", "plain"} { // a create can start from them
		if res, b := e.call("GET", "/templates/aliases/"+a, nil); res.StatusCode != http.StatusOK {
			t.Errorf("alias %s: %d %s", a, res.StatusCode, b)
		}
	}
	// A create of the template starts its start command, checked by its ready command.
	e.create(map[string]any{"templateID": "my-tpl"})
	e.fake.mu.Lock()
	got := e.fake.creates[len(e.fake.creates)-1]
	e.fake.mu.Unlock()
	if got.Image != "my-tpl" || got.StartCmd != "sleep 100" || got.ReadyCmd != "test -f /tmp/x" {
		t.Errorf("create request %+v", got)
	}
	// Another API server (no memory of the build) answers from the environment.
	h2 := e2b.New(e.fake, e2b.Options{Authorize: func(k string) bool { return k == testKey }})
	srv2 := httptest.NewServer(h2)
	defer func() { srv2.Close(); h2.Close() }()
	other := &env{t: t, h: h2, srv: srv2}
	if _, b := other.call("GET", "/templates/my-tpl/builds/"+build+"/status", nil); !strings.Contains(string(b), `"status":"ready"`) {
		t.Errorf("status on another server: %s", b)
	}
}

// build builds template name from fromImage with one RUN step, waits for it
// and returns its build ID.
func (e *tplEnv) build(name string) string {
	e.t.Helper()
	id, build := e.requestBuild(name)
	if res, b := e.call("POST", "/v2/templates/"+id+"/builds/"+build, map[string]any{"fromImage": "debian",
		"steps": []map[string]any{{"type": "RUN", "args": []string{"true"}}}}); res.StatusCode != http.StatusAccepted {
		e.t.Fatalf("start build of %s: %d %s", name, res.StatusCode, b)
	}
	if st := e.status(id, build); st.Status != "ready" {
		e.t.Fatalf("build of %s: %+v", name, st)
	}
	return build
}

// TestTemplateTags: a "name:tag" build keeps its tag (a create of name:tag
// starts that build while name moves on), assignTags, getTags and removeTags
// as the SDK calls them, and a template's deletion takes its tags along.
func TestTemplateTags(t *testing.T) {
	e := newTplEnv(t)
	b1 := e.build("tg:v1")
	b2 := e.build("tg")
	type tag struct{ Tag, BuildID string }
	tags := func() []tag {
		t.Helper()
		res, b := e.call("GET", "/templates/tg/tags", nil)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("get tags: %d %s", res.StatusCode, b)
		}
		var out []tag
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	createdFrom := func(template string) string {
		t.Helper()
		e.create(map[string]any{"templateID": template})
		e.fake.mu.Lock()
		defer e.fake.mu.Unlock()
		return e.fake.creates[len(e.fake.creates)-1].Image
	}
	if got, want := tags(), []tag{{"default", b2}, {"v1", b1}}; !slices.Equal(got, want) {
		t.Errorf("tags after builds of tg:v1 then tg: %v, want %v", got, want)
	}
	for tpl, want := range map[string]string{"tg:v1": "tg..v1", "tg": "tg", "tg:default": "tg", "python:3.12": "python:3.12"} {
		if got := createdFrom(tpl); got != want {
			t.Errorf("create of %s made a sandbox of image %q, want %q", tpl, got, want)
		}
	}

	res, b := e.call("POST", "/templates/tags", map[string]any{"target": "tg:v1", "tags": []string{"prod", "stable"}})
	var assigned struct {
		BuildID string
		Tags    []string
	}
	_ = json.Unmarshal(b, &assigned)
	if res.StatusCode != http.StatusOK || assigned.BuildID != b1 || !slices.Equal(assigned.Tags, []string{"prod", "stable"}) {
		t.Errorf("assign tags: %d %s, want build %s", res.StatusCode, b, b1)
	}
	if got, want := tags(), []tag{{"default", b2}, {"prod", b1}, {"stable", b1}, {"v1", b1}}; !slices.Equal(got, want) {
		t.Errorf("tags after assigning prod and stable to v1: %v, want %v", got, want)
	}
	if got := createdFrom("tg:prod"); got != "tg..prod" {
		t.Errorf("create of tg:prod: image %q", got)
	}
	for what, c := range map[string]struct {
		method string
		body   map[string]any
		code   int
	}{
		"assign from an unknown tag":      {"POST", map[string]any{"target": "tg:nope", "tags": []string{"x"}}, 404},
		"assign from an unknown template": {"POST", map[string]any{"target": "nope", "tags": []string{"x"}}, 404},
		"assign a bad tag":                {"POST", map[string]any{"target": "tg", "tags": []string{"Bad Tag"}}, 400},
		"assign no tag":                   {"POST", map[string]any{"target": "tg", "tags": []string{}}, 400},
		"remove an unknown tag":           {"DELETE", map[string]any{"name": "tg", "tags": []string{"nope"}}, 404},
		"remove the default tag":          {"DELETE", map[string]any{"name": "tg", "tags": []string{"default"}}, 400},
	} {
		res, b := e.call(c.method, "/templates/tags", c.body)
		var er struct{ Code int }
		_ = json.Unmarshal(b, &er)
		if res.StatusCode != c.code || er.Code != c.code {
			t.Errorf("%s: %d %s, want %d", what, res.StatusCode, b, c.code)
		}
	}
	if res, b := e.call("DELETE", "/templates/tags", map[string]any{"name": "tg", "tags": []string{"prod"}}); res.StatusCode != http.StatusNoContent {
		t.Errorf("remove tag prod: %d %s", res.StatusCode, b)
	}
	// The default tag moves to v1's build, and is no longer any other tag.
	if res, b := e.call("POST", "/templates/tags", map[string]any{"target": "tg:v1", "tags": []string{"default"}}); res.StatusCode != http.StatusOK {
		t.Errorf("assign default: %d %s", res.StatusCode, b)
	}
	if got, want := tags(), []tag{{"default", b1}, {"stable", b1}, {"v1", b1}}; !slices.Equal(got, want) {
		t.Errorf("tags after removing prod and moving default: %v, want %v", got, want)
	}

	if res, b := e.call("DELETE", "/templates/tg", nil); res.StatusCode != http.StatusNoContent {
		t.Fatalf("delete template: %d %s", res.StatusCode, b)
	}
	if res, _ := e.call("GET", "/templates/tg/tags", nil); res.StatusCode != http.StatusNotFound {
		t.Errorf("tags of a deleted template: %d", res.StatusCode)
	}
	e.fake.mu.Lock()
	left := slices.Collect(maps.Keys(e.fake.images))
	e.fake.mu.Unlock()
	if !slices.Equal(left, []string{"plain"}) {
		t.Errorf("images left after deleting tg: %v, want only plain", left)
	}
}

// TestTemplateDelete: DELETE /templates/{id} removes a template built through
// E2B's API (409 while a sandbox runs on it); other images and unknown IDs
// answer E2B's 404 and nothing is removed.
func TestTemplateDelete(t *testing.T) {
	e := newTplEnv(t)
	e.build("del-me")
	apiErr := func(what, id string, want int, sub string) {
		t.Helper()
		res, b := e.call("DELETE", "/templates/"+id, nil)
		var er struct {
			Code    int
			Message string
		}
		_ = json.Unmarshal(b, &er)
		if res.StatusCode != want || er.Code != want || !strings.Contains(er.Message, sub) {
			t.Errorf("%s: %d %s, want %d with %q", what, res.StatusCode, b, want, sub)
		}
	}
	apiErr("unknown template", "no-such", http.StatusNotFound, `template "no-such" not found`)
	apiErr("a dsec environment", "plain", http.StatusNotFound, "dsec image rm")
	apiErr("base", "base", http.StatusNotFound, "not found")
	if _, err := e.fake.Image(t.Context(), "plain"); err != nil {
		t.Errorf("a refused delete removed environment plain: %v", err)
	}

	e.fake.mu.Lock()
	e.fake.busy["del-me"] = true
	e.fake.mu.Unlock()
	apiErr("a template in use", "del-me", http.StatusConflict, "in use by a sandbox")
	if res, _ := e.call("GET", "/templates/aliases/del-me", nil); res.StatusCode != http.StatusOK {
		t.Errorf("a refused delete removed the template: alias lookup %d", res.StatusCode)
	}
	e.fake.mu.Lock()
	e.fake.busy["del-me"] = false
	e.fake.mu.Unlock()
	if res, b := e.call("DELETE", "/templates/del-me", nil); res.StatusCode != http.StatusNoContent {
		t.Fatalf("delete template: %d %s", res.StatusCode, b)
	}
	if res, _ := e.call("GET", "/templates/aliases/del-me", nil); res.StatusCode != http.StatusNotFound {
		t.Errorf("a deleted template is still found: alias lookup %d", res.StatusCode)
	}
	apiErr("a deleted template", "del-me", http.StatusNotFound, "not found")
}

func TestTemplateBuildErrors(t *testing.T) {
	e := newTplEnv(t)
	for name, c := range map[string]struct {
		body any
		code int
		msg  string
	}{
		"bad name":     {map[string]any{"name": "Bad Name"}, 400, "template name"},
		"no name":      {map[string]any{}, 400, "template name"},
		"base":         {map[string]any{"name": "base"}, 409, "default template"},
		"plain env":    {map[string]any{"name": "plain"}, 409, "not built as an E2B template"},
		"malformed":    {"{", 400, "malformed JSON"},
		"unauthorized": {map[string]any{"name": "x"}, 401, "API key"},
	} {
		var hdr []string
		if name == "unauthorized" {
			hdr = []string{"X-API-KEY", ""}
		}
		res, b := e.call("POST", "/v3/templates", c.body, hdr...)
		var er struct {
			Code    int
			Message string
		}
		_ = json.Unmarshal(b, &er)
		if res.StatusCode != c.code || er.Code != c.code || !strings.Contains(er.Message, c.msg) {
			t.Errorf("%s: %d %s, want %d with %q", name, res.StatusCode, b, c.code, c.msg)
		}
	}

	// A bad step is refused when the build starts; the build can start again.
	_, build := e.requestBuild("t1")
	res, b := e.call("POST", "/v2/templates/t1/builds/"+build, map[string]any{"steps": []map[string]any{{"type": "HEALTHCHECK"}}})
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "unknown step type") {
		t.Errorf("bad step: %d %s", res.StatusCode, b)
	}
	res, b = e.call("POST", "/v2/templates/t1/builds/"+build, map[string]any{"steps": []map[string]any{
		{"type": "COPY", "args": []string{"a", "/a"}, "filesHash": "never-uploaded"}}})
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "were not uploaded") {
		t.Errorf("missing upload: %d %s", res.StatusCode, b)
	}
	if res, _ := e.call("POST", "/v2/templates/other/builds/"+build, map[string]any{}); res.StatusCode != http.StatusNotFound {
		t.Errorf("build of another template: %d", res.StatusCode)
	}
	if res, _ := e.call("GET", "/templates/t1/builds/nope/status", nil); res.StatusCode != http.StatusNotFound {
		t.Errorf("status of an unknown build: %d", res.StatusCode)
	}

	// A failing RUN: status error, the step and the command's output.
	if res, b := e.call("POST", "/v2/templates/t1/builds/"+build, map[string]any{"fromImage": "debian",
		"steps": []map[string]any{{"type": "RUN", "args": []string{"echo out; exit 7"}}}}); res.StatusCode != http.StatusAccepted {
		t.Fatalf("start: %d %s", res.StatusCode, b)
	}
	st := e.status("t1", build)
	if st.Status != "error" || st.Reason == nil || st.Reason.Step == nil || *st.Reason.Step != "1" ||
		!strings.Contains(st.Reason.Message, "exited with code 7") || !strings.Contains(st.Reason.Message, "the output") ||
		!strings.Contains(st.Reason.Message, `runCmd("echo out; exit 7")`) {
		t.Errorf("failed build: %+v %+v", st, st.Reason)
	}
	if res, _ := e.call("GET", "/templates/aliases/t1", nil); res.StatusCode != http.StatusNotFound {
		t.Errorf("a failed build left template t1: %d", res.StatusCode)
	}

	// An unknown base: the error names it, at step "base".
	_, build = e.requestBuild("t2")
	e.call("POST", "/v2/templates/t2/builds/"+build, map[string]any{"fromImage": "nope"})
	st = e.status("t2", build)
	if st.Status != "error" || st.Reason == nil || st.Reason.Step == nil || *st.Reason.Step != "base" || !strings.Contains(st.Reason.Message, `"nope" not found`) {
		t.Errorf("unknown base: %+v", st)
	}

	// A tar that is not one is refused.
	_, b = e.call("GET", "/templates/t3/files/h3", nil)
	var link struct{ URL string }
	_ = json.Unmarshal(b, &link)
	req, _ := http.NewRequest("PUT", link.URL, strings.NewReader("not a tar archive, not at all; well over one block of text "+strings.Repeat("x", 600)))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Errorf("PUT of a non-tar: %d", res.StatusCode)
	}
	if _, b := e.call("GET", "/templates/t3/files/h3", nil); strings.Contains(string(b), `"present":true`) {
		t.Errorf("a refused upload is present: %s", b)
	}
}
