package e2b_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

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
//
// writeImage adds another.
func templateEnv(t *testing.T) (e *env, m *agent.Manager, writeImage func(name, labels string)) {
	t.Helper()
	dir := t.TempDir()
	rootfs := filepath.Join(dir, "rootfs")
	if err := os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755); err != nil {
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
	h := e2b.New(session.Chain(m), e2b.Options{Authorize: func(k string) bool { return k == testKey }, Secret: []byte("test")})
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); h.Close() })
	return &env{t: t, h: h, srv: srv}, m, writeImage
}

// TestTemplateBackend: a template recorded as fullvm creates a fullvm
// sandbox, a container template a container one; a template ID claimed by an
// image's label names that image; bad templates answer E2B's {code, message}
// and create nothing.
func TestTemplateBackend(t *testing.T) {
	e, m, writeImage := templateEnv(t)
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
