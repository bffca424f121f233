// Package envstore keeps environments and named layers. An environment is an
// image manifest (images.Manifest): one base layer, ordered toolkit layers, an
// optional workspace layer, base first, each layer with the image config it
// was built from. The layer index names built layers. Both live in a State:
// a directory on one machine (DirState: DIR/envs/NAME.json,
// DIR/layers/NAME.json) or etcd for a cluster (EtcdState); the layers' blobs
// live in the blob store (internal/image/blob). Changing a base used by N environments is one layer build plus N
// manifest rewrites (Rebase), never N rebuilds. Manifests written by earlier
// versions (base/toolkits/workspace) are read as they are and rewritten in the
// current format by the next change.
package envstore

import (
	"context"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/pkg/api"
)

// NamedLayer is an entry of the layer index: a built layer (its name, digest,
// size, chunk index and image config) and where it came from.
type NamedLayer struct {
	image.Layer
	Source  string    `json:"source,omitempty"`
	Created time.Time `json:"created"`
}

// Named is the index entry naming built layer l (from source).
func Named(name, source string, l image.Layer) NamedLayer {
	l.Name = name
	return NamedLayer{Layer: l, Source: source}
}

// Store is the environment store: the logic (names, layer resolution,
// compose, rebase, removal rules) over a State.
type Store struct {
	State State
	// Dir is the directory of a DirState store ("" for another State).
	Dir   string
	Blobs blob.Store // checked for layer existence on Compose (nil: not checked)
	// Spec names Blobs (blob.ParseSpec); Compose records it in the manifest so a
	// node knows where to read the layers.
	Spec string
	// InUse reports whether an environment or layer name is used by a sandbox; Remove
	// refuses those (the agent passes its own). An EtcdState also refuses to
	// remove an environment any node of the cluster marks in use.
	InUse func(name string) bool
}

// Open returns a store in directory dir (created if missing).
func Open(dir string, blobs blob.Store) (*Store, error) {
	st, err := OpenDir(dir)
	if err != nil {
		return nil, err
	}
	return &Store{State: st, Dir: dir, Blobs: blobs}, nil
}

// New returns a store over st.
func New(st State, blobs blob.Store) *Store { return &Store{State: st, Blobs: blobs} }

func checkName(kind, n string) error {
	if !image.ValidName.MatchString(n) {
		return errdefs.Invalid("invalid %s name %q (lowercase letters, digits, . _ -)", kind, n)
	}
	return nil
}

// PutLayer records name → layer in the index (replacing an older entry).
func (s *Store) PutLayer(ctx context.Context, l NamedLayer) error {
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
	return s.State.PutLayer(ctx, l)
}

// Layer returns a named layer.
func (s *Store) Layer(ctx context.Context, name string) (NamedLayer, error) {
	if err := checkName("layer", name); err != nil {
		return NamedLayer{}, err
	}
	l, _, err := s.State.Layer(ctx, name)
	return l, err
}

// ResolveLayer accepts a layer name or a digest and returns the layer as an
// environment refers to it (name, digest, size, index, config).
func (s *Store) ResolveLayer(ctx context.Context, ref string) (image.Layer, error) {
	l, _, err := s.resolveLayer(ctx, ref)
	return l, err
}

// resolveLayer is ResolveLayer, also returning the version of the index entry
// a name resolved through (0 for a digest).
func (s *Store) resolveLayer(ctx context.Context, ref string) (image.Layer, Version, error) {
	if strings.HasPrefix(ref, "sha256:") {
		if _, err := blob.ParseDigest(ref); err != nil {
			return image.Layer{}, 0, err
		}
		l := image.Layer{Digest: ref}
		if s.Blobs != nil {
			n, err := s.Blobs.Stat(ctx, ref)
			if err != nil {
				return image.Layer{}, 0, err
			}
			l.Size = n
		}
		if nl, ok := s.layerByDigest(ctx, ref); ok {
			// Built under a name: the same chunk index and image config.
			l.Index, l.Config = nl.Index, nl.Config
		}
		return l, 0, nil
	}
	if err := checkName("layer", ref); err != nil {
		return image.Layer{}, 0, err
	}
	l, v, err := s.State.Layer(ctx, ref)
	if err != nil {
		return image.Layer{}, 0, err
	}
	if s.Blobs != nil {
		if _, err := s.Blobs.Stat(ctx, l.Digest); err != nil {
			return image.Layer{}, 0, err
		}
	}
	return l.Layer, v, nil
}

// layerByDigest returns a named layer with digest d, if the index has one.
func (s *Store) layerByDigest(ctx context.Context, d string) (NamedLayer, bool) {
	ls, _ := s.State.Layers(ctx)
	for _, l := range ls {
		if l.Digest == d {
			return l, true
		}
	}
	return NamedLayer{}, false
}

// Compose creates or replaces environment name from layer names or digests.
// The manifest is written only if every named layer is still what it
// resolved to (a layer renamed or removed meanwhile: resolved again).
func (s *Store) Compose(ctx context.Context, name, base string, toolkits []string, workspace string) (image.Manifest, error) {
	if err := checkName("environment", name); err != nil {
		return image.Manifest{}, err
	}
	if base == "" {
		return image.Manifest{}, errdefs.Invalid("base: a base layer is required")
	}
	refs := append([]string{base}, toolkits...)
	if workspace != "" {
		refs = append(refs, workspace)
	}
	for range retries {
		m := image.Manifest{Name: name, BlobStore: s.Spec, Created: time.Now().UTC()}
		cond := Cond{Any: true, Layers: map[string]Version{}}
		for _, r := range refs {
			l, v, err := s.resolveLayer(ctx, r)
			if err != nil {
				return image.Manifest{}, err
			}
			if v != 0 {
				cond.Layers[r] = v
			}
			m.Layers = append(m.Layers, l)
		}
		image.Roles(m.Layers, workspace != "")
		_, err := s.State.PutEnv(ctx, m, cond)
		if !isChanged(err) {
			return m, err
		}
	}
	return image.Manifest{}, errdefs.Conflict("compose %q: its layers kept changing; try again", name)
}

// Get returns an environment (a manifest of any version, in the current form).
func (s *Store) Get(ctx context.Context, name string) (image.Manifest, error) {
	if err := checkName("environment", name); err != nil {
		return image.Manifest{}, err
	}
	m, _, err := s.State.Env(ctx, name)
	return m, err
}

// List returns environment names, sorted.
func (s *Store) List(ctx context.Context) ([]string, error) { return s.State.EnvNames(ctx) }

// ListLayers returns layer names, sorted.
func (s *Store) ListLayers(ctx context.Context) ([]string, error) {
	ls, err := s.State.Layers(ctx)
	out := make([]string, 0, len(ls))
	for _, l := range ls {
		out = append(out, l.Name)
	}
	return out, err
}

// Remove deletes an environment or, if no environment has that name, a layer name
// (the blob stays: other names or environments may share it). Refused while InUse
// (or, in etcd, while a node marks the environment in use), and a layer name is
// refused while an environment references it.
func (s *Store) Remove(ctx context.Context, name string) error {
	if err := checkName("image", name); err != nil {
		return err
	}
	if s.InUse != nil && s.InUse(name) {
		return errdefs.Conflict("%q is in use by a sandbox", name)
	}
	err := s.State.RemoveEnv(ctx, name)
	if !errdefs.Is(err, api.CodeNotFound) {
		return err
	}
	err = s.State.RemoveLayer(ctx, name)
	if errdefs.Is(err, api.CodeNotFound) {
		return errdefs.NotFound("no environment or layer named %q", name)
	}
	return err
}

// update applies f to environment name and writes it back if f changed it,
// again from a fresh read whenever another writer got there first.
func (s *Store) update(ctx context.Context, name string, f func(m *image.Manifest) (bool, error)) (image.Manifest, int, error) {
	for range retries {
		m, v, err := s.State.Env(ctx, name)
		if err != nil {
			return m, 0, err
		}
		changed, err := f(&m)
		if err != nil || !changed {
			return m, 0, err
		}
		n, err := s.State.PutEnv(ctx, m, Cond{Version: v})
		if !isChanged(err) {
			return m, n, err
		}
	}
	return image.Manifest{}, 0, errdefs.Conflict("environment %q kept changing; try again", name)
}

// SetPrefetchList records list (an access list blob's digest, "" to clear) as the
// prefetch list of layer digest in environment name.
func (s *Store) SetPrefetchList(ctx context.Context, name, digest, list string) (image.Manifest, error) {
	if list != "" {
		if _, err := blob.ParseDigest(list); err != nil {
			return image.Manifest{}, err
		}
	}
	if err := checkName("environment", name); err != nil {
		return image.Manifest{}, err
	}
	e, _, err := s.update(ctx, name, func(e *image.Manifest) (bool, error) {
		found := false
		for i := range e.Layers {
			if e.Layers[i].Digest == digest {
				e.Layers[i].PrefetchList, found = list, true
			}
		}
		if !found {
			return false, errdefs.NotFound("environment %q has no layer %s", name, digest)
		}
		now := time.Now().UTC()
		e.Updated = &now
		return true, nil
	})
	return e, err
}

// RebaseStats reports what a Rebase did.
type RebaseStats struct {
	Scanned      int   `json:"scanned"`
	Rewritten    int   `json:"rewritten"`
	BytesWritten int64 `json:"bytes_written"`
}

// Rebase points every environment whose base (or toolkit/workspace) layer is
// oldDigest at newLayer instead (with newLayer's config): N small manifest
// rewrites, no layer rebuilds. Each rewrite is conditional on the manifest
// being unchanged since it was read (a concurrent change is read again, never
// lost). Sandboxes already running keep the layers and the config they were
// created with.
func (s *Store) Rebase(ctx context.Context, oldDigest string, newLayer image.Layer) (RebaseStats, error) {
	var st RebaseStats
	if _, err := blob.ParseDigest(oldDigest); err != nil {
		return st, err
	}
	if _, err := blob.ParseDigest(newLayer.Digest); err != nil {
		return st, err
	}
	names, err := s.List(ctx)
	if err != nil {
		return st, err
	}
	now := time.Now().UTC()
	// Manifests are rewritten by rebaseWorkers at once: each rewrite waits for
	// its fsync (or etcd commit), and concurrent ones share them.
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(rebaseWorkers)
	for _, n := range names {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error {
			rewritten, nb, err := s.rebaseOne(gctx, n, oldDigest, newLayer, now)
			if errdefs.Is(err, api.CodeNotFound) {
				err = nil // removed meanwhile
			}
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
func (s *Store) rebaseOne(ctx context.Context, n, oldDigest string, newLayer image.Layer, now time.Time) (rewritten bool, written int, err error) {
	_, nb, err := s.update(ctx, n, func(e *image.Manifest) (bool, error) {
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
		if changed {
			e.Updated = &now
		}
		return changed, nil
	})
	return nb > 0, nb, err
}
