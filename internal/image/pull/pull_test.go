package pull_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	erofs "github.com/erofs/go-erofs"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/pull"
	"github.com/dsec-dev/dsec/internal/image/registry"
	"github.com/dsec-dev/dsec/internal/image/registry/registrytest"
	"github.com/dsec-dev/dsec/pkg/api"
)

type E = registrytest.Entry

type env struct {
	reg    *registrytest.Registry
	p      *pull.Puller
	blobs  blob.Store
	config string
}

// newEnv starts a token-auth registry and a puller with its credentials in a
// Docker config.json.
func newEnv(t *testing.T, mut func(*registry.Config)) *env {
	t.Helper()
	reg := registrytest.Start(t, "alice", "s3cret")
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.json")
	auth := base64.StdEncoding.EncodeToString([]byte("alice:s3cret"))
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, reg.Host, auth)), 0o600); err != nil {
		t.Fatal(err)
	}
	rc := registry.Config{DockerConfig: cfgPath, Insecure: []string{reg.Host}, Retries: 2, MinBackoff: 1e6}
	if mut != nil {
		mut(&rc)
	}
	return newEnvWith(t, reg, rc, dir, cfgPath)
}

func newEnvWith(t *testing.T, reg *registrytest.Registry, rc registry.Config, dir, cfgPath string) *env {
	c, err := registry.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	spec := "dir:" + filepath.Join(dir, "blobs")
	bs, err := blob.Open(spec, true)
	if err != nil {
		t.Fatal(err)
	}
	return &env{reg: reg, blobs: bs, config: cfgPath,
		p: &pull.Puller{Registry: c, Blobs: bs, Spec: spec, Dir: filepath.Join(dir, "pull")}}
}

// baseImage has two layers: files, a hard link, symlinks (one out of the
// layer), a dir with xattrs; then a whiteout and an opaque directory.
func baseImage(t *testing.T) v1.Image {
	l1 := registrytest.Layer(t,
		E{Name: "etc/", Type: tar.TypeDir},
		E{Name: "etc/a", Body: "alpha"},
		E{Name: "etc/keep", Body: "kept"},
		E{Name: "etc/hard", Type: tar.TypeLink, Linkname: "etc/keep"},
		E{Name: "etc/link", Type: tar.TypeSymlink, Linkname: "../../../outside"},
		E{Name: "data/", Type: tar.TypeDir, Xattrs: map[string]string{"user.tag": "v"}},
		E{Name: "data/x", Body: "x"},
		E{Name: "usr/bin/tool", Body: "#!/bin/sh\necho tool\n", Mode: 0o4755},
	)
	l2 := registrytest.Layer(t,
		E{Name: "etc/.wh.a"},
		E{Name: "data/", Type: tar.TypeDir},
		E{Name: "data/.wh..wh..opq"},
		E{Name: "data/y", Body: "y"},
	)
	return registrytest.Image(t, v1.Config{Env: []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}, WorkingDir: "/data", User: "1000",
		Entrypoint: []string{"/usr/bin/tool"}, Cmd: []string{"--help"}, ExposedPorts: map[string]struct{}{"8080/tcp": {}},
		Labels: map[string]string{"org.example": "yes"}}, l1, l2)
}

func open(t *testing.T, bs blob.Store, dg string) fs.FS {
	t.Helper()
	rc, err := bs.Open(context.Background(), dg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := erofs.Open(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return fsys
}

func lstat(t *testing.T, fsys fs.FS, name string) (fs.FileInfo, *erofs.Stat) {
	t.Helper()
	fi, err := fsys.(interface {
		Lstat(string) (fs.FileInfo, error)
	}).Lstat(name)
	if err != nil {
		t.Fatalf("lstat %s: %v", name, err)
	}
	st, _ := fi.Sys().(*erofs.Stat)
	return fi, st
}

func TestPullByTagConvertsEachLayer(t *testing.T) {
	e := newEnv(t, nil)
	want := e.reg.Push(t, "team/app:v1", baseImage(t))
	ctx := context.Background()
	got, err := e.p.Pull(ctx, e.reg.Host+"/team/app:v1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest != want || got.Image.Digest != want || got.Ref != e.reg.Host+"/team/app:v1" {
		t.Fatalf("pulled %+v, want digest %s", got, want)
	}
	if n := len(got.Image.Layers); n != 2 {
		t.Fatalf("%d layers, want 2", n)
	}
	c := got.Image.Config
	if c == nil || c.WorkingDir != "/data" || c.User != "1000" || len(c.Env) != 2 || c.Entrypoint[0] != "/usr/bin/tool" ||
		c.Cmd[0] != "--help" || len(c.ExposedPorts) != 1 || c.ExposedPorts[0] != "8080/tcp" || c.Labels["org.example"] != "yes" {
		t.Fatalf("config %+v", c)
	}
	l1 := open(t, e.blobs, got.Image.Layers[0].Digest)
	if b, err := fs.ReadFile(l1, "etc/hard"); err != nil || string(b) != "kept" {
		t.Fatalf("hard link: %q %v", b, err)
	}
	_, keep := lstat(t, l1, "etc/keep")
	if _, hard := lstat(t, l1, "etc/hard"); hard.Ino != keep.Ino || hard.Nlink != 2 {
		t.Fatalf("hard link: inode %d nlink %d, etc/keep's inode %d", hard.Ino, hard.Nlink, keep.Ino)
	}
	if tgt, err := fs.ReadLink(l1, "etc/link"); err != nil || tgt != "../../../outside" {
		t.Fatalf("symlink: %q %v", tgt, err)
	}
	// (go-erofs's FileInfo.Mode drops setuid; its raw Stat keeps it.)
	if _, st := lstat(t, l1, "usr/bin/tool"); st.Mode&fs.ModeSetuid == 0 || st.Mode.Perm() != 0o755 {
		t.Fatalf("tool mode %v, want setuid 0755", st.Mode)
	}
	if _, st := lstat(t, l1, "data"); st.Xattrs["user.tag"] != "v" {
		t.Fatalf("data xattrs %v", st.Xattrs)
	}
	l2 := open(t, e.blobs, got.Image.Layers[1].Digest)
	if fi, st := lstat(t, l2, "etc/a"); fi.Mode()&fs.ModeCharDevice == 0 || st.Rdev != 0 {
		t.Fatalf("whiteout etc/a: mode %v rdev %d, want a 0/0 character device", fi.Mode(), st.Rdev)
	}
	if _, st := lstat(t, l2, "data"); st.Xattrs["trusted.overlay.opaque"] != "y" {
		t.Fatalf("opaque dir xattrs %v", st.Xattrs)
	}
	if _, err := fs.Stat(l2, "data/.wh..wh..opq"); err == nil {
		t.Fatal("the opaque marker itself is in the layer")
	}
	if b, err := fs.ReadFile(l2, "data/y"); err != nil || string(b) != "y" {
		t.Fatalf("data/y: %q %v", b, err)
	}

	// Again: no blob fetched twice; by digest: no registry at all.
	before := e.reg.BlobGets()
	if _, err := e.p.Pull(ctx, e.reg.Host+"/team/app:v1"); err != nil {
		t.Fatal(err)
	}
	e.reg.Close()
	byDigest, err := e.p.Pull(ctx, e.reg.Host+"/team/app@"+want)
	if err != nil {
		t.Fatalf("by digest with the registry down: %v", err)
	}
	if byDigest.Image.Layers[1].Digest != got.Image.Layers[1].Digest {
		t.Fatal("same digest, other layers")
	}
	if after := e.reg.BlobGets(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("blob GETs %v → %v on a second pull", before, after)
	}
	refs, err := e.p.Refs()
	if err != nil || len(refs) != 1 || refs[0].Digest != want {
		t.Fatalf("refs %+v %v", refs, err)
	}
}

func TestConcurrentPullsFetchEachBlobOnce(t *testing.T) {
	e := newEnv(t, nil)
	shared := registrytest.Layer(t, E{Name: "base/f", Body: "shared"})
	a := registrytest.Image(t, v1.Config{}, shared, registrytest.Layer(t, E{Name: "a", Body: "a"}))
	b := registrytest.Image(t, v1.Config{}, shared, registrytest.Layer(t, E{Name: "b", Body: "b"}))
	e.reg.Push(t, "burst/a:1", a)
	e.reg.Push(t, "burst/b:1", b)
	const n = 24
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ref := e.reg.Host + "/burst/a:1"
			if i%2 == 1 {
				ref = e.reg.Host + "/burst/b:1"
			}
			_, errs[i] = e.p.Pull(context.Background(), ref)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	gets := e.reg.BlobGets()
	for _, l := range []v1.Layer{shared} {
		dg, _ := l.Digest()
		if gets[dg.String()] != 1 {
			t.Errorf("shared layer fetched %d times", gets[dg.String()])
		}
	}
	for dg, k := range gets {
		if k != 1 {
			t.Errorf("blob %s fetched %d times, want once", dg, k)
		}
	}
	if got := e.p.LayersFetched.Load(); got != 3 {
		t.Errorf("%d layers fetched, want 3 (one shared)", got)
	}
}

func TestMultiPlatformIndex(t *testing.T) {
	e := newEnv(t, nil)
	here := registrytest.Image(t, v1.Config{}, registrytest.Layer(t, E{Name: "arch", Body: runtime.GOARCH}))
	otherLayer := registrytest.Layer(t, E{Name: "arch", Body: "other"})
	other := registrytest.Image(t, v1.Config{}, otherLayer)
	idx := e.reg.PushIndex(t, "multi:1", registrytest.Index(t, map[string]v1.Image{"linux/" + runtime.GOARCH: here, "linux/s390x": other}))
	got, err := e.p.Pull(context.Background(), e.reg.Host+"/multi:1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest != idx {
		t.Fatalf("digest %s, want the index's %s", got.Digest, idx)
	}
	if b, err := fs.ReadFile(open(t, e.blobs, got.Image.Layers[0].Digest), "arch"); err != nil || string(b) != runtime.GOARCH {
		t.Fatalf("arch %q %v", b, err)
	}
	odg, _ := otherLayer.Digest()
	if e.reg.BlobGets()[odg.String()] != 0 {
		t.Fatal("the other platform's layer was fetched")
	}
	e.reg.PushIndex(t, "foreign:1", registrytest.Index(t, map[string]v1.Image{"linux/s390x": other}))
	_, err = e.p.Pull(context.Background(), e.reg.Host+"/foreign:1")
	if errdefs.CodeOf(err) != api.CodeNotFound {
		t.Fatalf("index for another platform only: %v (code %s), want not_found", err, errdefs.CodeOf(err))
	}
}

func TestTagMovedKeepsOldDigest(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	d1 := e.reg.Push(t, "moving:latest", registrytest.Image(t, v1.Config{}, registrytest.Layer(t, E{Name: "v", Body: "1"})))
	p1, err := e.p.Pull(ctx, e.reg.Host+"/moving")
	if err != nil {
		t.Fatal(err)
	}
	d2 := e.reg.Push(t, "moving:latest", registrytest.Image(t, v1.Config{}, registrytest.Layer(t, E{Name: "v", Body: "2"})))
	p2, err := e.p.Pull(ctx, e.reg.Host+"/moving:latest")
	if err != nil {
		t.Fatal(err)
	}
	if p1.Digest != d1 || p2.Digest != d2 || d1 == d2 {
		t.Fatalf("digests %s %s, want %s %s", p1.Digest, p2.Digest, d1, d2)
	}
	old, err := e.p.Pull(ctx, p1.Image.Name)
	if err != nil {
		t.Fatalf("pinned name %s: %v", p1.Image.Name, err)
	}
	if b, _ := fs.ReadFile(open(t, e.blobs, old.Image.Layers[0].Digest), "v"); string(b) != "1" {
		t.Fatalf("old digest gives %q", b)
	}
}

func TestShortNameThroughMirror(t *testing.T) {
	reg := registrytest.Start(t, "", "")
	dir := t.TempDir()
	hosts := filepath.Join(dir, "certs.d")
	if err := os.MkdirAll(filepath.Join(hosts, "docker.io"), 0o755); err != nil {
		t.Fatal(err)
	}
	toml := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+reg.Host, "http://"+reg.Host)
	if err := os.WriteFile(filepath.Join(hosts, "docker.io", "hosts.toml"), []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	want := reg.Push(t, "library/pyish:3.12-slim", registrytest.Image(t, v1.Config{}, registrytest.Layer(t, E{Name: "py", Body: "3.12"})))
	e := newEnvWith(t, reg, registry.Config{HostsDir: hosts, Retries: 1, MinBackoff: 1e6}, dir, "")
	got, err := e.p.Pull(context.Background(), "pyish:3.12-slim")
	if err != nil {
		t.Fatal(err)
	}
	if got.Ref != "docker.io/library/pyish:3.12-slim" || got.Digest != want {
		t.Fatalf("pulled %s %s, want docker.io's library/pyish at %s", got.Ref, got.Digest, want)
	}
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	img := registrytest.Image(t, v1.Config{}, registrytest.Layer(t, E{Name: "f", Body: "f"}))
	e.reg.Push(t, "ok:1", img)
	code := func(ref string) api.Code {
		_, err := e.p.Pull(ctx, ref)
		t.Logf("%s: %v", ref, err)
		return errdefs.CodeOf(err)
	}
	for ref, want := range map[string]api.Code{
		"Bad Ref!!":                    api.CodeInvalidArgument,
		e.reg.Host + "/ok@sha256:1234": api.CodeInvalidArgument,
		e.reg.Host + "/nosuch:1":       api.CodeNotFound,
		e.reg.Host + "/ok:nosuchtag":   api.CodeNotFound,
		"127.0.0.1:1/down:1":           api.CodeUnavailable, // nothing listens (and not insecure: refused before)
	} {
		if got := code(ref); got != want {
			t.Errorf("%s: code %s, want %s", ref, got, want)
		}
	}

	// Wrong credentials.
	wrong := filepath.Join(t.TempDir(), "config.json")
	_ = os.WriteFile(wrong, []byte(fmt.Sprintf(`{"auths":{%q:{"username":"alice","password":"nope"}}}`, e.reg.Host)), 0o600)
	bad := newEnvWith(t, e.reg, registry.Config{DockerConfig: wrong, Insecure: []string{e.reg.Host}, Retries: 1, MinBackoff: 1e6}, t.TempDir(), wrong)
	if _, err := bad.p.Pull(ctx, e.reg.Host+"/ok:1"); errdefs.CodeOf(err) != api.CodePermissionDenied {
		t.Errorf("wrong credentials: %v, want permission_denied", err)
	}
	// Plain HTTP to a registry not configured as insecure.
	strict := newEnvWith(t, e.reg, registry.Config{DockerConfig: e.config, Retries: 1, MinBackoff: 1e6}, t.TempDir(), e.config)
	if _, err := strict.p.Pull(ctx, e.reg.Host+"/ok:1"); errdefs.CodeOf(err) != api.CodeUnavailable {
		t.Errorf("plain HTTP not configured: %v, want unavailable", err)
	}

	// A tampered blob: refused, nothing recorded; the next pull of the good
	// content works.
	l := registrytest.Layer(t, E{Name: "t", Body: "true content"})
	dg, _ := l.Digest()
	e.reg.Push(t, "tampered:1", registrytest.Image(t, v1.Config{}, l))
	size, _ := l.Size()
	e.reg.Tamper(dg.String(), bytes.Repeat([]byte("x"), int(size))) // same length, other bytes
	_, err := e.p.Pull(ctx, e.reg.Host+"/tampered:1")
	if errdefs.CodeOf(err) != api.CodeUnavailable || !errors.Is(err, blob.ErrDigestMismatch) {
		t.Fatalf("tampered blob: %v, want unavailable with a digest mismatch", err)
	}
	if _, err := os.Stat(filepath.Join(e.p.Dir, "layers", dg.Hex+".json")); !os.IsNotExist(err) {
		t.Fatalf("a record of the tampered layer exists: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.p.Dir, "tmp")); len(ents) != 0 {
		t.Fatalf("temp files left: %v", ents)
	}
	// What a crashed process left half-written goes at the next start.
	if err := os.WriteFile(filepath.Join(e.p.Dir, "tmp", "fetch-1.layer"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.p.Clean(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(e.p.Dir, "tmp", "fetch-1.layer")); !os.IsNotExist(err) {
		t.Fatalf("a half-written fetch survived Clean: %v", err)
	}
	e.reg.Tamper(dg.String(), nil)
	if _, err := e.p.Pull(ctx, e.reg.Host+"/tampered:1"); err != nil {
		t.Fatalf("after the registry mends: %v", err)
	}
}

func TestRetriesHonourRetryAfter(t *testing.T) {
	e := newEnv(t, func(c *registry.Config) { c.Retries = 3 })
	e.reg.Push(t, "busy:1", registrytest.Image(t, v1.Config{}, registrytest.Layer(t, E{Name: "f", Body: "f"})))
	e.reg.Busy(2)
	if _, err := e.p.Pull(context.Background(), e.reg.Host+"/busy:1"); err != nil {
		t.Fatalf("after two 429s: %v", err)
	}
	e.reg.Busy(10)
	_, err := e.p.Pull(context.Background(), e.reg.Host+"/busy:1")
	if errdefs.CodeOf(err) != api.CodeUnavailable {
		t.Fatalf("still busy after the retries: %v, want unavailable", err)
	}
}

// A caller whose deadline passes stops waiting (deadline_exceeded); the fetch
// it shared goes on for the others, and is not started again.
func TestDeadlineLeavesSharedFetch(t *testing.T) {
	e := newEnv(t, nil)
	e.reg.Push(t, "slow:1", registrytest.Image(t, v1.Config{}, registrytest.Layer(t, E{Name: "f", Body: "f"})))
	e.reg.Slow(300 * time.Millisecond)
	done := make(chan error, 1)
	go func() {
		_, err := e.p.Pull(context.Background(), e.reg.Host+"/slow:1")
		done <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := e.p.Pull(ctx, e.reg.Host+"/slow:1"); errdefs.CodeOf(err) != api.CodeDeadlineExceeded {
		t.Fatalf("past its deadline: %v, want deadline_exceeded", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the patient caller: %v", err)
	}
	for dg, n := range e.reg.BlobGets() {
		if n != 1 {
			t.Errorf("blob %s fetched %d times", dg, n)
		}
	}
}
