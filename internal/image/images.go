// Package image is dsec's one image tree: the layer type (Layer), the manifest
// format every image is described in (Manifest: directory images and layered
// environments alike, older manifests still read), the image config kept from
// OCI images and its merge rules (Config), and the node's image store, which
// resolves an image name to its layers and mounts EROFS layers for a sandbox.
//
// Layer order: base first, everywhere (manifests, the API, layerd requests).
// The one place the order flips is Image.Lower, which returns the overlayfs
// lowerdir list (top-most first) for a driver that stacks directories.
package image

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Image is one resolved image.
type Image struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Layers, base first. Directory layers have an absolute Dir; EROFS layers get
	// one when Store.Mount acquires them for a sandbox.
	Layers []Layer `json:"layers"`
	// Config is the image's effective config (Manifest.ImageConfig); nil: none.
	Config *Config `json:"config,omitempty"`
	// Ref and Digest are set for an image pulled from a registry: the
	// normalised reference and the digest it resolved to.
	Ref    string `json:"ref,omitempty"`
	Digest string `json:"digest,omitempty"`
	// LastUsed: a pulled image's last use on this node (zero: unknown).
	LastUsed time.Time `json:"last_used,omitzero"`
}

// Layered reports whether img has EROFS layers (which need mounting).
func (img Image) Layered() bool {
	for _, l := range img.Layers {
		if l.Digest != "" {
			return true
		}
	}
	return false
}

// Lower returns the layers' directories top-most first: overlayfs's lowerdir
// order. It is complete once every layer has a Dir (after Mount for EROFS layers).
func (img Image) Lower() []string {
	var out []string
	for i := len(img.Layers) - 1; i >= 0; i-- {
		if d := img.Layers[i].Dir; d != "" {
			out = append(out, d)
		}
	}
	return out
}

// LayerMounter mounts layers on the node (internal/image/lazy's layerd client).
type LayerMounter interface {
	// Acquire mounts layers for holder and returns one directory per layer, in order.
	Acquire(ctx context.Context, holder string, layers []Layer) ([]string, error)
	// Release drops everything holder holds.
	Release(ctx context.Context, holder string) error
	// Sync drops every holder not in keep.
	Sync(ctx context.Context, keep []string) error
}

// EnvResolver resolves layered environments kept outside the images directory
// (internal/image/envstore's manifests, made by `dsec image compose`).
type EnvResolver interface {
	// ResolveEnv returns environment name, or a not_found error if there is no
	// such environment.
	ResolveEnv(name string) (Image, error)
	// ListEnvs returns the environment names, sorted.
	ListEnvs() []string
}

// RefPuller makes images named by registry reference available on the node
// (internal/image/pull).
type RefPuller interface {
	// PullRef resolves ref (REGISTRY/REPO[:TAG], a digest reference, a short
	// name normalised as Docker does) to a digest and returns its image with
	// Ref and Digest set, fetching what the node does not have.
	PullRef(ctx context.Context, ref string) (Image, error)
	// PulledRefs returns the images of the references this node pulled,
	// from its own records (no registry is asked).
	PulledRefs() ([]Image, error)
	// Has reports whether the node has the image ref last resolved to (a
	// digest reference: that image), from its own records.
	Has(ref string) bool
	// Progress is how far the pull in flight of ref got on this node
	// (false: none is in flight); Pulls lists every pull in flight.
	Progress(ref string) (api.PullProgress, bool)
	Pulls() []api.PullProgress
}

// IsReference reports whether name can only be a registry reference, never a
// local image or environment name: it has a registry or repository path
// ('/'), a tag (':') or a digest ('@'). A bare name ("python") is a local
// name; its registry form is "python:latest".
func IsReference(name string) bool { return strings.ContainsAny(name, "/:@") }

// Pin returns reference ref pinned to digest: REPO@DIGEST (its tag dropped).
func Pin(ref, digest string) string {
	repo, _, _ := strings.Cut(ref, "@")
	if i := strings.LastIndexByte(repo, ':'); i > strings.LastIndexByte(repo, '/') {
		repo = repo[:i]
	}
	return repo + "@" + digest
}

// ValidName matches image, environment and layer names.
var ValidName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// ManifestFile is a directory image's manifest under DIR/NAME.
const ManifestFile = "image.json"

// Store is a directory of images: DIR/NAME/image.json plus the trees it names.
type Store struct {
	Dir     string
	Default string // the image used when a request names none
	// Layers mounts layered environments; nil: only directory images resolve.
	Layers LayerMounter
	// Envs resolves names that have no DIR/NAME/image.json (nil: none).
	Envs EnvResolver
	// BlobStore is the blob store of EROFS layers whose manifest names none.
	BlobStore string
	// Refs pulls images named by registry reference (nil: references are
	// refused).
	Refs RefPuller
}

// Mount acquires img's EROFS layers for holder (a sandbox ID) and sets their
// Dir. Directory layers are left as they are.
func (s *Store) Mount(ctx context.Context, img *Image, holder string) error {
	var idx []int
	var want []Layer
	for i, l := range img.Layers {
		if l.Digest != "" {
			idx = append(idx, i)
			want = append(want, l)
		}
	}
	if len(want) == 0 {
		return nil
	}
	if s.Layers == nil {
		return errdefs.New(api.CodeNotImplemented, "image %q is a layered environment and this node has no layer service", img.Name)
	}
	dirs, err := s.Layers.Acquire(ctx, holder, want)
	if err != nil {
		return err
	}
	if len(dirs) != len(want) {
		_ = s.Layers.Release(ctx, holder)
		return errdefs.Internal(fmt.Errorf("got %d mounts for %d layers", len(dirs), len(want)), "image %q", img.Name)
	}
	img.Layers = append([]Layer(nil), img.Layers...)
	for j, i := range idx {
		img.Layers[i].Dir = dirs[j]
	}
	return nil
}

// Pulls returns the pulls of registry references in flight on the node
// (ref set: only ref's, none or one); not_implemented when the store pulls
// no references.
func (s *Store) Pulls(ref string) ([]api.PullProgress, error) {
	if s.Refs == nil {
		return nil, errdefs.New(api.CodeNotImplemented, "this node does not pull images by registry reference")
	}
	if ref == "" {
		return s.Refs.Pulls(), nil
	}
	out := []api.PullProgress{}
	if pr, ok := s.Refs.Progress(ref); ok {
		out = append(out, pr)
	}
	return out, nil
}

// Unmount releases what holder acquired (no-op without a layer service).
func (s *Store) Unmount(ctx context.Context, holder string) error {
	if s.Layers == nil {
		return nil
	}
	return s.Layers.Release(ctx, holder)
}

// Resolve returns the image called name ("" = the default); a registry
// reference is resolved (and pulled if need be) with no deadline of its own.
func (s *Store) Resolve(name string) (Image, error) {
	return s.ResolveContext(context.Background(), name)
}

// ResolveContext returns the image called name ("" = the default): a local
// directory image or environment first, else a registry reference resolved
// to a digest and pulled unless the node has it.
func (s *Store) ResolveContext(ctx context.Context, name string) (Image, error) {
	if name == "" {
		name = s.Default
	}
	if !ValidName.MatchString(name) {
		if s.Refs != nil && IsReference(name) {
			img, err := s.Refs.PullRef(ctx, name)
			if err != nil {
				return Image{}, err
			}
			img.Name = name
			return img, nil
		}
		return Image{}, errdefs.Invalid("invalid image name %q", name)
	}
	dir := filepath.Join(s.Dir, name)
	m, err := ReadManifest(filepath.Join(dir, ManifestFile))
	if errors.Is(err, os.ErrNotExist) {
		if s.Envs != nil {
			img, eerr := s.Envs.ResolveEnv(name)
			if eerr == nil || errdefs.CodeOf(eerr) != api.CodeNotFound {
				return img, eerr
			}
		}
		return Image{}, errdefs.NotFound("image %q not found: no directory image in %s (run `make setup` to build the default images) and no environment of that name (`dsec image compose`)", name, s.Dir)
	}
	if err != nil {
		return Image{}, errdefs.Internal(err, "image %q", name)
	}
	img, err := FromManifest(m, dir, s.BlobStore)
	if err != nil {
		return Image{}, errdefs.Internal(err, "image %q", name)
	}
	img.Name = name
	return img, nil
}

// FromManifest resolves m into an image: relative directory layers against dir
// (each must exist), EROFS layers without a store to the manifest's blob store,
// else defaultStore.
func FromManifest(m Manifest, dir, defaultStore string) (Image, error) {
	img := Image{Name: m.Name, Description: m.Description, Config: m.ImageConfig(), Layers: make([]Layer, len(m.Layers))}
	store := m.BlobStore
	if store == "" {
		store = defaultStore
	}
	for i, l := range m.Layers {
		if l.Digest != "" {
			if l.Store == "" {
				l.Store = store
			}
			if l.Store == "" {
				return Image{}, fmt.Errorf("layer %s has no blob store", l.Digest)
			}
		} else {
			if !filepath.IsAbs(l.Dir) {
				l.Dir = filepath.Join(dir, l.Dir)
			}
			if fi, err := os.Stat(l.Dir); err != nil || !fi.IsDir() {
				return Image{}, fmt.Errorf("layer directory %s missing", l.Dir)
			}
		}
		img.Layers[i] = l
	}
	return img, nil
}

// List returns the names of the images in the store and of the environments,
// sorted (a directory image hides an environment of the same name).
func (s *Store) List() []string {
	ents, _ := os.ReadDir(s.Dir)
	seen := map[string]bool{}
	var names []string
	for _, e := range ents {
		if _, err := os.Stat(filepath.Join(s.Dir, e.Name(), ManifestFile)); err == nil {
			names = append(names, e.Name())
			seen[e.Name()] = true
		}
	}
	if s.Envs != nil {
		for _, n := range s.Envs.ListEnvs() {
			if !seen[n] {
				names = append(names, n)
			}
		}
	}
	sort.Strings(names)
	return names
}
