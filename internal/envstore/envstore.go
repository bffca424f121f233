// Package envstore keeps environments and named layers. An environment is an
// image manifest (images.Manifest, DIR/envs/NAME.json): one base layer, ordered
// toolkit layers, an optional workspace layer, base first, each layer with the
// image config it was built from. The layer index (DIR/layers/NAME.json) names
// built layers. Changing a base used by N environments is one layer build plus N
// manifest rewrites (Rebase), never N rebuilds. Manifests written by earlier
// versions (base/toolkits/workspace) are read as they are and rewritten in the
// current format by the next change.
package envstore

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/dsec-dev/dsec/internal/blob"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/images"
)

// NamedLayer is an entry of the layer index: a built layer (its name, digest,
// size, chunk index and image config) and where it came from.
type NamedLayer struct {
	images.Layer
	Source  string    `json:"source,omitempty"`
	Created time.Time `json:"created"`
}

// Named is the index entry naming built layer l (from source).
func Named(name, source string, l images.Layer) NamedLayer {
	l.Name = name
	return NamedLayer{Layer: l, Source: source}
}

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
	if !images.ValidName.MatchString(n) {
		return errdefs.Invalid("invalid %s name %q (lowercase letters, digits, . _ -)", kind, n)
	}
	return nil
}

func readJSON(p string, v any) error {
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func (s *Store) layerPath(name string) string { return filepath.Join(s.Dir, "layers", name+".json") }
func (s *Store) envPath(name string) string   { return filepath.Join(s.Dir, "envs", name+".json") }

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
	if err := l.Config.Validate(); err != nil {
		return err
	}
	l.Role, l.Dir, l.Store, l.PrefetchList = "", "", "", ""
	if l.Created.IsZero() {
		l.Created = time.Now().UTC()
	}
	b, err := json.MarshalIndent(l, "", "  ")
	if err == nil {
		err = images.WriteFileAtomic(s.layerPath(l.Name), append(b, '\n'))
	}
	if err != nil {
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
	err := readJSON(s.layerPath(name), &l)
	if errors.Is(err, os.ErrNotExist) {
		return l, errdefs.NotFound("layer %q not found (build it with `dsec image build --name %s`)", name, name)
	}
	if err != nil {
		return l, errdefs.Internal(err, "read layer %q", name)
	}
	return l, nil
}

// ResolveLayer accepts a layer name or a digest and returns the layer as an
// environment refers to it (name, digest, size, index, config).
func (s *Store) ResolveLayer(ctx context.Context, ref string) (images.Layer, error) {
	if strings.HasPrefix(ref, "sha256:") {
		if _, err := blob.ParseDigest(ref); err != nil {
			return images.Layer{}, err
		}
		l := images.Layer{Digest: ref}
		if s.Blobs != nil {
			n, err := s.Blobs.Stat(ctx, ref)
			if err != nil {
				return images.Layer{}, err
			}
			l.Size = n
		}
		if nl, ok := s.layerByDigest(ref); ok {
			// Built under a name: the same chunk index and image config.
			l.Index, l.Config = nl.Index, nl.Config
		}
		return l, nil
	}
	l, err := s.Layer(ref)
	if err != nil {
		return images.Layer{}, err
	}
	if s.Blobs != nil {
		if _, err := s.Blobs.Stat(ctx, l.Digest); err != nil {
			return images.Layer{}, err
		}
	}
	return l.Layer, nil
}

// layerByDigest returns a named layer with digest d, if the index has one.
func (s *Store) layerByDigest(d string) (NamedLayer, bool) {
	names, _ := s.ListLayers()
	for _, n := range names {
		if l, err := s.Layer(n); err == nil && l.Digest == d {
			return l, true
		}
	}
	return NamedLayer{}, false
}

// Compose creates or replaces environment name from layer names or digests.
func (s *Store) Compose(ctx context.Context, name, base string, toolkits []string, workspace string) (images.Manifest, error) {
	if err := checkName("environment", name); err != nil {
		return images.Manifest{}, err
	}
	if base == "" {
		return images.Manifest{}, errdefs.Invalid("base: a base layer is required")
	}
	refs := append([]string{base}, toolkits...)
	if workspace != "" {
		refs = append(refs, workspace)
	}
	m := images.Manifest{Name: name, BlobStore: s.Spec, Created: time.Now().UTC()}
	for _, r := range refs {
		l, err := s.ResolveLayer(ctx, r)
		if err != nil {
			return images.Manifest{}, err
		}
		m.Layers = append(m.Layers, l)
	}
	images.Roles(m.Layers, workspace != "")
	if _, err := images.WriteManifest(s.envPath(name), m); err != nil {
		return images.Manifest{}, errdefs.Internal(err, "write environment %q", name)
	}
	return m, nil
}

// Get returns an environment (a manifest of any version, in the current form).
func (s *Store) Get(name string) (images.Manifest, error) {
	if err := checkName("environment", name); err != nil {
		return images.Manifest{}, err
	}
	m, err := images.ReadManifest(s.envPath(name))
	if errors.Is(err, os.ErrNotExist) {
		return m, errdefs.NotFound("environment %q not found", name)
	}
	if err != nil {
		return m, errdefs.Internal(err, "read environment %q", name)
	}
	m.Name = name
	return m, nil
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
		for _, r := range e.Layers {
			if r.Digest == l.Digest && (r.Name == "" || r.Name == name) {
				return errdefs.Conflict("layer %q is used by environment %q", name, en)
			}
		}
	}
	if err := os.Remove(s.layerPath(name)); err != nil {
		return errdefs.Internal(err, "remove layer %q", name)
	}
	return nil
}

// SetPrefetchList records list (an access list blob's digest, "" to clear) as the
// prefetch list of layer digest in environment name.
func (s *Store) SetPrefetchList(name, digest, list string) (images.Manifest, error) {
	if list != "" {
		if _, err := blob.ParseDigest(list); err != nil {
			return images.Manifest{}, err
		}
	}
	e, err := s.Get(name)
	if err != nil {
		return e, err
	}
	found := false
	for i := range e.Layers {
		if e.Layers[i].Digest == digest {
			e.Layers[i].PrefetchList, found = list, true
		}
	}
	if !found {
		return e, errdefs.NotFound("environment %q has no layer %s", name, digest)
	}
	now := time.Now().UTC()
	e.Updated = &now
	if _, err := images.WriteManifest(s.envPath(name), e); err != nil {
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
// oldDigest at newLayer instead (with newLayer's config): N small manifest
// rewrites, no layer rebuilds. Sandboxes already running keep the layers and the
// config they were created with.
func (s *Store) Rebase(ctx context.Context, oldDigest string, newLayer images.Layer) (RebaseStats, error) {
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
func (s *Store) rebaseOne(n, oldDigest string, newLayer images.Layer, now time.Time) (rewritten bool, written int, err error) {
	e, err := s.Get(n)
	if err != nil {
		return false, 0, err
	}
	changed := false
	for i, r := range e.Layers {
		if r.Digest == oldDigest {
			l := newLayer
			l.Role = r.Role
			if l.Name == "" {
				l.Name = r.Name
			}
			e.Layers[i] = l
			changed = true
		}
	}
	if !changed {
		return false, 0, nil
	}
	e.Updated = &now
	nb, err := images.WriteManifest(s.envPath(n), e)
	if err != nil {
		return false, 0, errdefs.Internal(err, "rewrite environment %q", n)
	}
	return true, nb, nil
}
