package e2b_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/mock"
	"github.com/dsec-dev/dsec/internal/frontend/e2b"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// templateEnv is a Handler over a node with two mock backends (container, the
// default, and fullvm) and images that record their backend and template:
//
//	tiny         the default image
//	vmonly       backend fullvm
//	desk         backend fullvm, template "desk-vm"
//	e2b-desk     backend container, template "desk"
//	snap-1       inherited template "desk" (a snapshot of e2b-desk)
//	bogus        backend fncall
//	wd           working_dir /srv (setWorkdir)
//
// writeImage adds another; reads counts the handler's image and sandbox lookups.
func templateEnv(t *testing.T) (e *env, m *agent.Manager, writeImage func(name, labels string), reads *lookups) {
	t.Helper()
	dir := t.TempDir()
	rootfs := filepath.Join(dir, "rootfs")
	if err := os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(rootfs, "srv"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	images := map[string]string{
		"tiny":     ``,
		"vmonly":   `"` + e2b.LabelBackend + `":"fullvm"`,
		"desk":     `"` + e2b.LabelBackend + `":"fullvm","` + e2b.LabelTemplate + `":"desk-vm"`,
		"e2b-desk": `"` + e2b.LabelBackend + `":"container","` + e2b.LabelTemplate + `":"desk"`,
		"snap-1":   `"` + e2b.LabelBackend + `":"container","` + e2b.LabelTemplate + `":"desk"`,
		"bogus":    `"` + e2b.LabelBackend + `":"fncall"`,
	}
	writeImage = func(name, labels string) {
		m := `{"version":2,"name":"` + name + `","layers":[{"role":"base","dir":"` + rootfs + `"}],"config":{"labels":{` + labels + `}}}`
		if labels == "" {
			m = `{"version":2,"name":"` + name + `","layers":[{"role":"base","dir":"` + rootfs + `"}]}`
		}
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, image.ManifestFile), []byte(m), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, labels := range images {
		writeImage(name, labels)
	}
	if err := os.MkdirAll(filepath.Join(dir, "wd"), 0o755); err != nil {
		t.Fatal(err)
	}
	wd := `{"version":2,"name":"wd","layers":[{"role":"base","dir":"` + rootfs + `"}],"config":{"working_dir":"/srv"}}`
	if err := os.WriteFile(filepath.Join(dir, "wd", image.ManifestFile), []byte(wd), 0o644); err != nil {
		t.Fatal(err)
	}
	host := mock.NewHost()
	reg, err := driver.NewRegistry(
		agenttest.MockWith(t, mock.Config{Host: host, BackendName: api.BackendContainer}),
		agenttest.MockWith(t, mock.Config{Host: host, BackendName: api.BackendFullVM}))
	if err != nil {
		t.Fatal(err)
	}
	m = agenttest.New(t, agenttest.Options{Config: func(c *agent.Config) {
		c.Driver, c.Drivers = nil, reg
		c.Images = &image.Store{Dir: dir, Default: "tiny"}
	}})
	reads = &lookups{}
	count := func(next session.Service) session.Service { return countImages{next, reads} }
	h := e2b.New(session.Chain(m, count), e2b.Options{Authorize: func(k string) bool { return k == testKey }, Secret: []byte("test")})
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); h.Close() })
	return &env{t: t, h: h, srv: srv}, m, writeImage, reads
}

// lookups counts a service's Image and Get calls.
type lookups struct{ images, gets atomic.Int64 }

type countImages struct {
	session.Service
	n *lookups
}

func (c countImages) Image(ctx context.Context, name string) (api.Image, error) {
	c.n.images.Add(1)
	return c.Service.Image(ctx, name)
}

func (c countImages) Get(ctx context.Context, id string) (api.Sandbox, error) {
	c.n.gets.Add(1)
	return c.Service.Get(ctx, id)
}

// TestTemplateWorkdir: a command that names no directory starts in the
// WorkingDir of its template's image (a template's setWorkdir), else in the
// user's home; one naming a directory starts there. The image is looked up on
// a sandbox's first command only.
func TestTemplateWorkdir(t *testing.T) {
	e, _, _, reads := templateEnv(t)
	pwd := func(c created, dir string) string {
		t.Helper()
		req := bash("pwd")
		if dir != "" {
			req.Process.Cwd = &dir
		}
		st, err := e.process(c, true).Start(t.Context(), connect.NewRequest(req))
		if err != nil {
			t.Fatal(err)
		}
		evs, err := collect(st)
		if err != nil {
			t.Fatal(err)
		}
		_, out, _, end := output(t, evs)
		if end.GetExitCode() != 0 {
			t.Fatalf("pwd in %q: %v", dir, end)
		}
		return strings.TrimSpace(out)
	}
	wd := e.create(map[string]any{"templateID": "wd"})
	// The mock backend runs processes in a directory of the host: the
	// sandbox's directory is the end of pwd's answer.
	images, gets := reads.images.Load(), reads.gets.Load()
	if got := pwd(wd, ""); !strings.HasSuffix(got, "/srv") {
		t.Errorf("template with WorkingDir /srv: a command starts in %q, want .../srv", got)
	}
	firstImages, firstGets := reads.images.Load()-images, reads.gets.Load()-gets
	images, gets = reads.images.Load(), reads.gets.Load()
	if got := pwd(wd, ""); !strings.HasSuffix(got, "/srv") {
		t.Errorf("second command starts in %q, want .../srv", got)
	}
	if n := reads.images.Load() - images; n != 0 || firstImages != 1 {
		t.Errorf("image lookups: %d on a sandbox's first command, %d on its second; want 1 and 0", firstImages, n)
	}
	if n := reads.gets.Load() - gets; n != firstGets-1 {
		t.Errorf("sandbox lookups: %d on a sandbox's first command, %d on its second; want one fewer", firstGets, n)
	}
	if got := pwd(wd, "/etc"); !strings.HasSuffix(got, "/etc") {
		t.Errorf("a command naming /etc starts in %q", got)
	}
	base := e.create(map[string]any{"templateID": "tiny"})
	if got := pwd(base, ""); !strings.HasSuffix(got, "/root") {
		t.Errorf("template without WorkingDir: a command starts in %q, want root's home .../root", got)
	}
}

// TestTemplateBackend: a template recorded as fullvm creates a fullvm
// sandbox, a container template a container one; a template ID claimed by an
// image's label names that image; bad templates answer E2B's {code, message}
// and create nothing.
func TestTemplateBackend(t *testing.T) {
	e, m, writeImage, _ := templateEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct{ template, image, backend string }{
		{"base", "tiny", api.BackendContainer},
		{"tiny", "tiny", api.BackendContainer},
		{"vmonly", "vmonly", api.BackendFullVM},
		{"desk", "e2b-desk", api.BackendContainer},     // claimed by e2b-desk (and its snapshot): not the image named desk
		{"desk-vm", "desk", api.BackendFullVM},         // the image named desk, through its label
		{"e2b-desk", "e2b-desk", api.BackendContainer}, // an image is its own name's template too
		{"snap-1", "snap-1", api.BackendContainer},
	} {
		c := e.create(map[string]any{"templateID": tc.template})
		sb, err := m.Get(ctx, c.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		if sb.Image != tc.image || sb.Backend != tc.backend {
			t.Errorf("template %s: a %s sandbox of image %q, want %s of %q", tc.template, sb.Backend, sb.Image, tc.backend, tc.image)
		}
		if c.TemplateID != tc.template {
			t.Errorf("template %s: answer names template %q", tc.template, c.TemplateID)
		}
		res, b := e.call("GET", "/sandboxes/"+c.SandboxID, nil)
		if res.StatusCode != http.StatusOK || decode[detail](t, b).TemplateID != tc.template {
			t.Errorf("template %s: GET answers %d %s", tc.template, res.StatusCode, b)
		}
	}
	// An image made just now is a template at once, with its backend.
	writeImage("late", `"`+e2b.LabelBackend+`":"fullvm"`)
	c := e.create(map[string]any{"templateID": "late"})
	if sb, err := m.Get(ctx, c.SandboxID); err != nil || sb.Backend != api.BackendFullVM {
		t.Errorf("template late (made after the image list was read): %+v %v, want a fullvm sandbox", sb, err)
	}

	before, err := m.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, b := e.call("POST", "/v2/sandboxes", map[string]any{"templateID": "no-such-template"})
	checkErr(t, res, b, http.StatusNotFound)
	res, b = e.call("POST", "/v2/sandboxes", map[string]any{"templateID": "bogus"})
	checkErr(t, res, b, http.StatusBadRequest)
	after, err := m.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Fatalf("bad templates changed the sandboxes: %d before, %d after", len(before), len(after))
	}
}
