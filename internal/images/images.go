// Package images resolves an image name to the read-only lower directories of a
// sandbox's root file system. Today an image is a directory tree on local disk
// (made by scripts/setup.sh); the layered EROFS image service replaces the mechanism
// behind the same seam: a name in, a list of lower directories out.
package images

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Image is one resolved image.
type Image struct {
	Name        string   `json:"name"`
	Lower       []string `json:"lower"` // absolute paths, top-most first
	Description string   `json:"description,omitempty"`
	// Layers is set for a layered environment: its EROFS layers, base first. Its
	// Lower is empty until Store.Mount acquires the layer mounts for a sandbox.
	Layers []Layer `json:"layers,omitempty"`
}

// Layer is one EROFS layer of a layered environment.
type Layer struct {
	Digest string `json:"digest"`
	Store  string `json:"store"`          // blob store spec, e.g. dir:/var/lib/dsec/blobs
	Size   int64  `json:"size,omitempty"` // expected blob size, if the manifest says
	Role   string `json:"role,omitempty"` // base, toolkit or workspace
	// Index is the digest of the layer's chunk index, if any (blob.ChunkIndex).
	Index string `json:"index,omitempty"`
	// PrefetchList is the digest of the layer's recorded access list, if any
	// (lazy.AccessList): a node mounting the layer prefetches those chunks.
	PrefetchList string `json:"prefetch_list,omitempty"`
}

// LayerUsage is a layer's accounting on this node.
type LayerUsage struct {
	BlobSize, BytesFetched, ChunkSize, CacheHits, CacheMisses int64
	Prefetched                                                int64
	Mounted                                                   bool
	Holders                                                   int
}

// View describes img for the API, with this node's accounting of its layers
// (usage by digest; nil: nothing mounted or fetched).
func (img Image) View(usage map[string]LayerUsage, isDefault bool) api.Image {
	v := api.Image{Name: img.Name, Kind: "directory", Default: isDefault}
	if len(img.Layers) == 0 {
		return v
	}
	v.Kind = "layered"
	for _, l := range img.Layers {
		u := usage[l.Digest]
		il := api.ImageLayer{Digest: l.Digest, Role: l.Role, BlobStore: l.Store, Size: l.Size,
			BytesFetched: u.BytesFetched, ChunkSize: u.ChunkSize, CacheHits: u.CacheHits, CacheMisses: u.CacheMisses,
			Mounted: u.Mounted, Sandboxes: u.Holders, PrefetchList: l.PrefetchList, Prefetched: u.Prefetched}
		if il.Size == 0 {
			il.Size = u.BlobSize
		}
		v.Layers = append(v.Layers, il)
		v.Size += il.Size
		v.BytesFetched += il.BytesFetched
	}
	return v
}

// LayerAccounting is implemented by a LayerMounter that keeps per-layer
// accounting (layerd): usage by digest, for the layers this node knows.
type LayerAccounting interface {
	LayerUsage(ctx context.Context) (map[string]LayerUsage, error)
}

// LayerMounter mounts layers on the node (internal/lazy's layerd client).
type LayerMounter interface {
	// Acquire mounts layers for holder and returns one directory per layer, in order.
	Acquire(ctx context.Context, holder string, layers []Layer) ([]string, error)
	// Release drops everything holder holds.
	Release(ctx context.Context, holder string) error
	// Sync drops every holder not in keep.
	Sync(ctx context.Context, keep []string) error
}

// EnvResolver resolves layered environments kept outside the images directory
// (internal/envstore's manifests, made by `dsec image compose`).
type EnvResolver interface {
	// ResolveEnv returns environment name's layers, base first, or a not_found
	// error if there is no such environment.
	ResolveEnv(name string) (Image, error)
	// ListEnvs returns the environment names, sorted.
	ListEnvs() []string
}

// manifest is DIR/NAME/image.json; its lower entries are relative to DIR/NAME. A
// layered environment names layers instead: {"name", "layers": ["sha256:..."]
// (base first, then toolkits, then the workspace), "blob_store": "dir:PATH",
// optional "sizes": [bytes per layer], optional "indexes": [chunk index digest per
// layer, "" for none], optional "prefetch_lists": [access list digest per layer]}.
type manifest struct {
	Name        string   `json:"name"`
	Lower       []string `json:"lower"`
	Description string   `json:"description,omitempty"`
	Layers      []string `json:"layers,omitempty"`
	BlobStore   string   `json:"blob_store,omitempty"`
	Sizes       []int64  `json:"sizes,omitempty"`
	Indexes     []string `json:"indexes,omitempty"`
	Prefetch    []string `json:"prefetch_lists,omitempty"`
}

var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// Store is a directory of images: DIR/NAME/image.json plus the trees it names.
type Store struct {
	Dir     string
	Default string // the image used when a request names none
	// Layers mounts layered environments; nil: only directory images resolve.
	Layers LayerMounter
	// Envs resolves names that have no DIR/NAME/image.json (nil: none).
	Envs EnvResolver
}

// Mount acquires img's layer mounts for holder (a sandbox ID) and fills img.Lower,
// top-most layer first (workspace, toolkits, base). Directory images are left as
// they are.
func (s *Store) Mount(ctx context.Context, img *Image, holder string) error {
	if len(img.Layers) == 0 {
		return nil
	}
	if s.Layers == nil {
		return errdefs.New(api.CodeNotImplemented, "image %q is a layered environment and this node has no layer service", img.Name)
	}
	dirs, err := s.Layers.Acquire(ctx, holder, img.Layers)
	if err != nil {
		return err
	}
	if len(dirs) != len(img.Layers) {
		_ = s.Layers.Release(ctx, holder)
		return errdefs.Internal(fmt.Errorf("got %d mounts for %d layers", len(dirs), len(img.Layers)), "image %q", img.Name)
	}
	img.Lower = make([]string, len(dirs))
	for i, d := range dirs {
		img.Lower[len(dirs)-1-i] = d
	}
	return nil
}

// Unmount releases what holder acquired (no-op without a layer service).
func (s *Store) Unmount(ctx context.Context, holder string) error {
	if s.Layers == nil {
		return nil
	}
	return s.Layers.Release(ctx, holder)
}

// Resolve returns the image called name ("" = the default).
func (s *Store) Resolve(name string) (Image, error) {
	if name == "" {
		name = s.Default
	}
	if !validName.MatchString(name) {
		return Image{}, errdefs.Invalid("invalid image name %q", name)
	}
	dir := filepath.Join(s.Dir, name)
	b, err := os.ReadFile(filepath.Join(dir, "image.json"))
	if os.IsNotExist(err) {
		if s.Envs != nil {
			img, eerr := s.Envs.ResolveEnv(name)
			if eerr == nil || errdefs.CodeOf(eerr) != api.CodeNotFound {
				return img, eerr
			}
		}
		return Image{}, errdefs.NotFound("image %q not found: no directory image in %s (run `make setup` to build the default images) and no environment of that name (`dsec image compose`)", name, s.Dir)
	}
	if err != nil {
		return Image{}, errdefs.Internal(err, "read image %q", name)
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Image{}, errdefs.Internal(err, "parse image %q manifest", name)
	}
	img := Image{Name: name, Description: m.Description}
	if len(m.Layers) > 0 {
		if m.BlobStore == "" {
			return Image{}, errdefs.Internal(fmt.Errorf("layers without blob_store"), "image %q", name)
		}
		for i, d := range m.Layers {
			l := Layer{Digest: d, Store: m.BlobStore, Role: "toolkit"}
			if i == 0 {
				l.Role = "base"
			}
			if i < len(m.Sizes) {
				l.Size = m.Sizes[i]
			}
			if i < len(m.Indexes) {
				l.Index = m.Indexes[i]
			}
			if i < len(m.Prefetch) {
				l.PrefetchList = m.Prefetch[i]
			}
			img.Layers = append(img.Layers, l)
		}
		return img, nil
	}
	if len(m.Lower) == 0 {
		return Image{}, errdefs.Internal(fmt.Errorf("no lower directories"), "image %q", name)
	}
	for _, l := range m.Lower {
		p := l
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, l)
		}
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			return Image{}, errdefs.Internal(fmt.Errorf("lower %s missing", p), "image %q", name)
		}
		img.Lower = append(img.Lower, p)
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
		if _, err := os.Stat(filepath.Join(s.Dir, e.Name(), "image.json")); err == nil {
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
