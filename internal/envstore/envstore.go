// Package envstore keeps environments and named layers. An environment is a small
// JSON manifest (DIR/envs/NAME.json): one base layer, ordered toolkit layers, an
// optional workspace layer. The layer index (DIR/layers/NAME.json) names built
// layers. Changing a base used by N environments is one layer build plus N manifest
// rewrites (Rebase), never N rebuilds.
package envstore

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/dsec-dev/dsec/internal/blob"
	"github.com/dsec-dev/dsec/internal/errdefs"
)

// LayerRef is one layer of an environment.
type LayerRef struct {
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
	Name   string `json:"name,omitempty"` // the layer's name in the index when composed
	// Index is the digest of the layer's chunk index (blob.ChunkIndex), if built
	// with one: nodes verify each chunk they fetch against it.
	Index string `json:"index,omitempty"`
	// PrefetchList is the digest of the layer's recorded access list (`dsec image
	// record`): nodes prefetch those chunks when they first mount the layer.
	PrefetchList string `json:"prefetch_list,omitempty"`
}

// Env is an environment manifest.
type Env struct {
	Name      string     `json:"name"`
	Base      LayerRef   `json:"base"`
	Toolkits  []LayerRef `json:"toolkits,omitempty"` // bottom to top
	Workspace *LayerRef  `json:"workspace,omitempty"`
	// BlobStore is the spec of the blob store holding the layers (blob.ParseSpec),
	// recorded at compose; empty: the node's default store.
	BlobStore string     `json:"blob_store,omitempty"`
	Created   time.Time  `json:"created"`
	Updated   *time.Time `json:"updated,omitempty"`
}

// Layers returns the layers top-most first (the overlay lowerdir order).
func (e Env) Layers() []LayerRef {
	var out []LayerRef
	if e.Workspace != nil {
		out = append(out, *e.Workspace)
	}
	for i := len(e.Toolkits) - 1; i >= 0; i-- {
		out = append(out, e.Toolkits[i])
	}
	return append(out, e.Base)
}

// eachLayer calls fn with a pointer to each of e's layers.
func (e *Env) eachLayer(fn func(*LayerRef)) {
	fn(&e.Base)
	for i := range e.Toolkits {
		fn(&e.Toolkits[i])
	}
	if e.Workspace != nil {
		fn(e.Workspace)
	}
}

// Role names the part layer i of Layers() plays: base, toolkit or workspace.
func (e Env) Role(i int) string {
	switch {
	case i == len(e.Toolkits)+1 && e.Workspace != nil || i == len(e.Toolkits) && e.Workspace == nil:
		return "base"
	case i == 0 && e.Workspace != nil:
		return "workspace"
	}
	return "toolkit"
}

// NamedLayer is an entry of the layer index.
type NamedLayer struct {
	Name    string    `json:"name"`
	Digest  string    `json:"digest"`
	Size    int64     `json:"size"`
	Source  string    `json:"source,omitempty"`
	Index   string    `json:"index,omitempty"` // chunk index digest (see LayerRef)
	Created time.Time `json:"created"`
}

var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// Store is the manifest store rooted at Dir.
type Store struct {
	Dir   string
	Blobs blob.Store // checked for layer existence on Compose (nil: not checked)
	// Spec names Blobs (blob.ParseSpec); Compose records it in the manifest so a
	// node knows where to read the layers.
	Spec string
	// InUse reports whether an environment or layer name is used by a sandbox; Remove
	// refuses those (the agent passes its own).
	InUse func(name string) bool
}

// Open returns a store at dir (created if missing).
func Open(dir string, blobs blob.Store) (*Store, error) {
	for _, d := range []string{"envs", "layers"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, errdefs.Internal(err, "envstore %s", dir)
		}
	}
	return &Store{Dir: dir, Blobs: blobs}, nil
}

func checkName(kind, n string) error {
	if !validName.MatchString(n) {
		return errdefs.Invalid("invalid %s name %q (lowercase letters, digits, . _ -)", kind, n)
	}
	return nil
}

// writeJSON writes v to p atomically (temp file, fsync, rename). It returns the bytes written.
func writeJSON(p string, v any) (int, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return 0, err
	}
	b = append(b, '\n')
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	return len(b), os.Rename(f.Name(), p)
}

func readJSON(p string, v any) error {
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// PutLayer records name → layer in the index (replacing an older entry).
func (s *Store) PutLayer(l NamedLayer) error {
	if err := checkName("layer", l.Name); err != nil {
		return err
	}
	if _, err := blob.ParseDigest(l.Digest); err != nil {
		return err
	}
	if l.Index != "" {
		if _, err := blob.ParseDigest(l.Index); err != nil {
			return err
		}
	}
	if l.Created.IsZero() {
		l.Created = time.Now().UTC()
	}
	if _, err := writeJSON(filepath.Join(s.Dir, "layers", l.Name+".json"), l); err != nil {
		return errdefs.Internal(err, "write layer %q", l.Name)
	}
	return nil
}

// Layer returns a named layer.
func (s *Store) Layer(name string) (NamedLayer, error) {
	if err := checkName("layer", name); err != nil {
		return NamedLayer{}, err
	}
	var l NamedLayer
	err := readJSON(filepath.Join(s.Dir, "layers", name+".json"), &l)
	if errors.Is(err, os.ErrNotExist) {
		return l, errdefs.NotFound("layer %q not found (build it with `dsec image build --name %s`)", name, name)
	}
	if err != nil {
		return l, errdefs.Internal(err, "read layer %q", name)
	}
	return l, nil
}

// ResolveLayer accepts a layer name or a digest.
func (s *Store) ResolveLayer(ctx context.Context, ref string) (LayerRef, error) {
	if strings.HasPrefix(ref, "sha256:") {
		if _, err := blob.ParseDigest(ref); err != nil {
			return LayerRef{}, err
		}
		var size int64 = -1
		if s.Blobs != nil {
			n, err := s.Blobs.Stat(ctx, ref)
			if err != nil {
				return LayerRef{}, err
			}
			size = n
		}
		return LayerRef{Digest: ref, Size: size}, nil
	}
	l, err := s.Layer(ref)
	if err != nil {
		return LayerRef{}, err
	}
	if s.Blobs != nil {
		if _, err := s.Blobs.Stat(ctx, l.Digest); err != nil {
			return LayerRef{}, err
		}
	}
	return LayerRef{Digest: l.Digest, Size: l.Size, Name: l.Name, Index: l.Index}, nil
}

// Compose creates or replaces environment name from layer names or digests.
func (s *Store) Compose(ctx context.Context, name, base string, toolkits []string, workspace string) (Env, error) {
	if err := checkName("environment", name); err != nil {
		return Env{}, err
	}
	e := Env{Name: name, BlobStore: s.Spec, Created: time.Now().UTC()}
	var err error
	if e.Base, err = s.ResolveLayer(ctx, base); err != nil {
		return Env{}, err
	}
	for _, t := range toolkits {
		r, err := s.ResolveLayer(ctx, t)
		if err != nil {
			return Env{}, err
		}
		e.Toolkits = append(e.Toolkits, r)
	}
	if workspace != "" {
		r, err := s.ResolveLayer(ctx, workspace)
		if err != nil {
			return Env{}, err
		}
		e.Workspace = &r
	}
	if _, err := writeJSON(s.envPath(name), e); err != nil {
		return Env{}, errdefs.Internal(err, "write environment %q", name)
	}
	return e, nil
}

func (s *Store) envPath(name string) string { return filepath.Join(s.Dir, "envs", name+".json") }

// Get returns an environment.
func (s *Store) Get(name string) (Env, error) {
	if err := checkName("environment", name); err != nil {
		return Env{}, err
	}
	var e Env
	err := readJSON(s.envPath(name), &e)
	if errors.Is(err, os.ErrNotExist) {
		return e, errdefs.NotFound("environment %q not found", name)
	}
	if err != nil {
		return e, errdefs.Internal(err, "read environment %q", name)
	}
	return e, nil
}

// List returns environment names, sorted.
func (s *Store) List() ([]string, error) { return listNames(filepath.Join(s.Dir, "envs")) }

// ListLayers returns layer names, sorted.
func (s *Store) ListLayers() ([]string, error) { return listNames(filepath.Join(s.Dir, "layers")) }

func listNames(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, errdefs.Internal(err, "list %s", dir)
	}
	out := []string{}
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".json"); ok && !strings.HasPrefix(n, ".") {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Remove deletes an environment or, if no environment has that name, a layer name
// (the blob stays: other names or environments may share it). Refused while InUse,
// and a layer name is refused while an environment references it.
func (s *Store) Remove(name string) error {
	if err := checkName("image", name); err != nil {
		return err
	}
	if s.InUse != nil && s.InUse(name) {
		return errdefs.Conflict("%q is in use by a sandbox", name)
	}
	err := os.Remove(s.envPath(name))
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		if err != nil {
			return errdefs.Internal(err, "remove environment %q", name)
		}
		return nil
	}
	l, err := s.Layer(name)
	if err != nil {
		return errdefs.NotFound("no environment or layer named %q", name)
	}
	envs, _ := s.List()
	for _, en := range envs {
		e, err := s.Get(en)
		if err != nil {
			continue
		}
		for _, r := range e.Layers() {
			if r.Digest == l.Digest && (r.Name == "" || r.Name == name) {
				return errdefs.Conflict("layer %q is used by environment %q", name, en)
			}
		}
	}
	if err := os.Remove(filepath.Join(s.Dir, "layers", name+".json")); err != nil {
		return errdefs.Internal(err, "remove layer %q", name)
	}
	return nil
}

// SetPrefetchList records list (an access list blob's digest, "" to clear) as the
// prefetch list of layer digest in environment name.
func (s *Store) SetPrefetchList(name, digest, list string) (Env, error) {
	if list != "" {
		if _, err := blob.ParseDigest(list); err != nil {
			return Env{}, err
		}
	}
	e, err := s.Get(name)
	if err != nil {
		return e, err
	}
	found := false
	set := func(r *LayerRef) {
		if r.Digest == digest {
			r.PrefetchList, found = list, true
		}
	}
	e.eachLayer(set)
	if !found {
		return e, errdefs.NotFound("environment %q has no layer %s", name, digest)
	}
	now := time.Now().UTC()
	e.Updated = &now
	if _, err := writeJSON(s.envPath(name), e); err != nil {
		return e, errdefs.Internal(err, "write environment %q", name)
	}
	return e, nil
}

// RebaseStats reports what a Rebase did.
type RebaseStats struct {
	Scanned      int   `json:"scanned"`
	Rewritten    int   `json:"rewritten"`
	BytesWritten int64 `json:"bytes_written"`
}

// Rebase points every environment whose base (or toolkit/workspace) layer is
// oldDigest at newLayer instead: N small manifest rewrites, no layer rebuilds.
func (s *Store) Rebase(ctx context.Context, oldDigest string, newLayer LayerRef) (RebaseStats, error) {
	var st RebaseStats
	if _, err := blob.ParseDigest(oldDigest); err != nil {
		return st, err
	}
	if _, err := blob.ParseDigest(newLayer.Digest); err != nil {
		return st, err
	}
	names, err := s.List()
	if err != nil {
		return st, err
	}
	now := time.Now().UTC()
	// Manifests are rewritten by rebaseWorkers at once: each rewrite waits for
	// its fsync, and concurrent fsyncs share the file system's journal commits.
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(rebaseWorkers)
	for _, n := range names {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error {
			rewritten, nb, err := s.rebaseOne(n, oldDigest, newLayer, now)
			mu.Lock()
			defer mu.Unlock()
			st.Scanned++
			if rewritten {
				st.Rewritten++
				st.BytesWritten += int64(nb)
			}
			return err
		})
	}
	err = g.Wait()
	if err == nil {
		err = ctx.Err()
	}
	return st, err
}

// rebaseWorkers is how many manifests Rebase rewrites at once.
const rebaseWorkers = 16

// rebaseOne points environment n's layers that are oldDigest at newLayer.
func (s *Store) rebaseOne(n, oldDigest string, newLayer LayerRef, now time.Time) (rewritten bool, written int, err error) {
	e, err := s.Get(n)
	if err != nil {
		return false, 0, err
	}
	changed := false
	swap := func(r *LayerRef) {
		if r.Digest == oldDigest {
			name := r.Name
			*r = newLayer
			if r.Name == "" {
				r.Name = name
			}
			changed = true
		}
	}
	e.eachLayer(swap)
	if !changed {
		return false, 0, nil
	}
	e.Updated = &now
	nb, err := writeJSON(s.envPath(n), e)
	if err != nil {
		return false, 0, errdefs.Internal(err, "rewrite environment %q", n)
	}
	return true, nb, nil
}
