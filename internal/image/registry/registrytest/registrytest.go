// Package registrytest runs a real OCI registry on loopback for tests
// (go-containerregistry's pkg/registry over net/http/httptest) behind a
// bearer-token front (the registry token flow, with basic credentials at its
// token endpoint), counts the manifest HEADs and blob GETs it serves, can tamper with a blob or
// answer 429s or refuse manifest HEADs, and builds and pushes test images (layers from tar entries,
// multi-platform indexes).
package registrytest

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	ggcr "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Registry is a running test registry.
type Registry struct {
	// Host is HOST:PORT (configure it as insecure: it speaks plain HTTP).
	Host string
	srv  *httptest.Server
	user string
	pass string

	mu       sync.Mutex
	blobGets map[string]int    // digest → GETs served
	tampered map[string][]byte // digest → content served instead
	busy     int               // answer this many requests 429 first
	delay    time.Duration     // before serving each blob
	stall    int               // >0: serve this many bytes of each blob, then hang
	resume   chan struct{}     // closed by Resume: stalled blobs go on
	gets     []Get             // every manifest and blob GET, in order
	heads    []Get             // every manifest HEAD, in order
	noHead   bool              // answer 405 to a manifest HEAD
}

// Get is one GET of a manifest or a blob the registry answered.
type Get struct {
	// Client is the IP address the request came from.
	Client string
	// Manifest: a manifest (Name is the tag or digest asked for); else a
	// blob (Name is its digest).
	Manifest bool
	Name     string
}

// token is the one token the front hands out.
const token = "test-token"

// Start starts a registry; with user set, every /v2/ request needs a bearer
// token, which /token gives for those basic credentials.
func Start(t testing.TB, user, pass string) *Registry { return StartAt(t, "127.0.0.1:0", user, pass) }

// StartAt is Start listening on addr (HOST:PORT; e.g. an address that
// processes in other network namespaces reach).
func StartAt(t testing.TB, addr, user, pass string) *Registry {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	r := StartOn(l, user, pass)
	t.Cleanup(r.srv.Close)
	return r
}

// StartOn is Start serving on l (nil: a new loopback port), for a program
// that runs a test registry at an address its user chose; Close stops it.
func StartOn(l net.Listener, user, pass string) *Registry {
	r := &Registry{user: user, pass: pass, blobGets: map[string]int{}, tampered: map[string][]byte{}}
	inner := ggcr.New(ggcr.Logger(nopLogger()))
	mux := http.NewServeMux()
	mux.HandleFunc("/token", r.token)
	mux.HandleFunc("/", func(w http.ResponseWriter, req *http.Request) { r.serve(w, req, inner) })
	r.srv = httptest.NewUnstartedServer(mux)
	if l != nil {
		_ = r.srv.Listener.Close()
		r.srv.Listener = l
	}
	r.srv.Start()
	r.Host = strings.TrimPrefix(r.srv.URL, "http://")
	return r
}

// Gets returns every manifest and blob GET served so far, in order.
func (r *Registry) Gets() []Get {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Get(nil), r.gets...)
}

// Heads returns every manifest HEAD served (or refused) so far, in order.
func (r *Registry) Heads() []Get {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Get(nil), r.heads...)
}

// RefuseHead makes the registry answer a manifest HEAD 405 Method Not
// Allowed (false: answer it again).
func (r *Registry) RefuseHead(refuse bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.noHead = refuse
}

// Close stops the registry (it is then down).
func (r *Registry) Close() { r.srv.Close() }

func (r *Registry) token(w http.ResponseWriter, req *http.Request) {
	u, p, ok := req.BasicAuth()
	if !ok || u != r.user || p != r.pass {
		http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"bad credentials"}]}`, http.StatusUnauthorized)
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"token": token, "expires_in": 300, "issued_at": time.Now().Format(time.RFC3339)})
}

func (r *Registry) serve(w http.ResponseWriter, req *http.Request, inner http.Handler) {
	if r.user != "" && strings.HasPrefix(req.URL.Path, "/v2/") || r.user != "" && req.URL.Path == "/v2" {
		if req.Header.Get("Authorization") != "Bearer "+token {
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+r.srv.URL+`/token",service="registrytest"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"token required"}]}`)
			return
		}
	}
	r.mu.Lock()
	if r.busy > 0 && strings.HasPrefix(req.URL.Path, "/v2/") && req.URL.Path != "/v2/" {
		r.busy--
		r.mu.Unlock()
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	var bad []byte
	var delay time.Duration
	stall := 0
	var resume chan struct{}
	client, _, _ := net.SplitHostPort(req.RemoteAddr)
	if i := strings.Index(req.URL.Path, "/manifests/"); i >= 0 && req.Method == http.MethodGet {
		r.gets = append(r.gets, Get{Client: client, Manifest: true, Name: req.URL.Path[i+len("/manifests/"):]})
	}
	if i := strings.Index(req.URL.Path, "/manifests/"); i >= 0 && req.Method == http.MethodHead {
		r.heads = append(r.heads, Get{Client: client, Manifest: true, Name: req.URL.Path[i+len("/manifests/"):]})
		if r.noHead {
			r.mu.Unlock()
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
	}
	if i := strings.Index(req.URL.Path, "/blobs/sha256:"); i >= 0 && req.Method == http.MethodGet {
		dg := req.URL.Path[i+len("/blobs/"):]
		r.blobGets[dg]++
		r.gets = append(r.gets, Get{Client: client, Name: dg})
		bad, delay, stall, resume = r.tampered[dg], r.delay, r.stall, r.resume
	}
	r.mu.Unlock()
	if stall > 0 {
		w = &stallWriter{ResponseWriter: w, left: stall, done: req.Context().Done(), resume: resume}
	}
	time.Sleep(delay)
	if bad != nil {
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(bad)
		return
	}
	inner.ServeHTTP(w, req)
}

// stallWriter passes the first left bytes of a body, then hangs until the
// client goes away (a registry that stops sending in the middle of a blob)
// or resume is closed (then it sends the rest).
type stallWriter struct {
	http.ResponseWriter
	left    int
	done    <-chan struct{}
	resume  <-chan struct{}
	resumed bool
}

func (s *stallWriter) Write(b []byte) (int, error) {
	if s.resumed {
		return s.ResponseWriter.Write(b)
	}
	n := min(len(b), s.left)
	n, err := s.ResponseWriter.Write(b[:n])
	s.left -= n
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
	if err != nil || s.left > 0 {
		return n, err
	}
	select {
	case <-s.done:
		return n, io.ErrClosedPipe
	case <-s.resume:
		s.resumed = true
		m, err := s.ResponseWriter.Write(b[n:])
		return n + m, err
	}
}

// Stall makes the registry send only the first n bytes of each blob and
// then hang until the client goes away (0: serve blobs whole again).
func (r *Registry) Stall(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stall = n
	if n > 0 && r.resume == nil {
		r.resume = make(chan struct{})
	}
}

// Resume lets the blobs stalled by Stall go on to their end, and serves
// later blobs whole.
func (r *Registry) Resume() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stall = 0
	if r.resume != nil {
		close(r.resume)
		r.resume = nil
	}
}

// BlobGets returns how many times each blob was fetched.
func (r *Registry) BlobGets() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, v := range r.blobGets {
		out[k] = v
	}
	return out
}

// Tamper makes the registry serve content for blob dg.
func (r *Registry) Tamper(dg string, content []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tampered[dg] = content
}

// Slow makes the registry wait d before serving each blob.
func (r *Registry) Slow(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.delay = d
}

// Busy makes the next n registry requests answer 429 with Retry-After: 1.
func (r *Registry) Busy(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.busy = n
}

// Entry is one tar member of a test layer.
type Entry struct {
	Name     string
	Type     byte // tar.TypeReg (default), TypeDir, TypeSymlink, TypeLink
	Body     string
	Linkname string
	Mode     int64
	Xattrs   map[string]string
}

// Layer builds a gzip layer from entries.
func Layer(t testing.TB, entries ...Entry) v1.Layer {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.Name, Typeflag: e.Type, Linkname: e.Linkname, Mode: e.Mode, ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.Body))
		}
		for k, v := range e.Xattrs {
			if h.PAXRecords == nil {
				h.PAXRecords = map[string]string{}
			}
			h.PAXRecords["SCHILY.xattr."+k] = v
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			_, _ = io.WriteString(tw, e.Body)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return LayerFromTar(t, buf.Bytes())
}

// LayerFromTar makes a gzip layer of an uncompressed tar.
func LayerFromTar(t testing.TB, b []byte) v1.Layer {
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Image is an image of layers (base first) with config cfg.
func Image(t testing.TB, cfg v1.Config, layers ...v1.Layer) v1.Image {
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layers...)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// Index is a multi-platform index of images by platform.
func Index(t testing.TB, byPlatform map[string]v1.Image) v1.ImageIndex {
	var adds []mutate.IndexAddendum
	for p, img := range byPlatform {
		pl, err := v1.ParsePlatform(p)
		if err != nil {
			t.Fatal(err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: pl}})
	}
	return mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
}

func (r *Registry) opts() []remote.Option {
	if r.user == "" {
		return nil
	}
	return []remote.Option{remote.WithAuth(&authn.Basic{Username: r.user, Password: r.pass})}
}

// Push pushes img as HOST/repo (repo: REPO:TAG) and returns its digest.
func (r *Registry) Push(t testing.TB, repo string, img v1.Image) string {
	ref, err := name.ParseReference(r.Host+"/"+repo, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, r.opts()...); err != nil {
		t.Fatal(err)
	}
	dg, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return dg.String()
}

// PushIndex pushes idx as HOST/repo and returns its digest.
func (r *Registry) PushIndex(t testing.TB, repo string, idx v1.ImageIndex) string {
	ref, err := name.ParseReference(r.Host+"/"+repo, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx, r.opts()...); err != nil {
		t.Fatal(err)
	}
	dg, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return dg.String()
}
