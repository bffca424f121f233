package image

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/dsec-dev/dsec/internal/datafmt"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// ManifestVersion is the version of the manifest format Marshal writes.
const ManifestVersion = 2

// Manifest is the one description of an image on disk, a directory image
// (DIR/NAME/image.json) and a layered environment (`dsec image compose`,
// ENVSTORE/envs/NAME.json) alike:
//
//	{"version": 2, "name": "task", "description": "...",
//	 "blob_store": "dir:/var/lib/dsec/blobs",
//	 "layers": [                                   // base first, then toolkits, then the workspace
//	   {"role": "base", "dir": "rootfs"},          // a directory layer (relative to the image dir), or
//	   {"role": "toolkit", "name": "jdk", "digest": "sha256:...", "size": 123,
//	    "index": "sha256:...", "prefetch_list": "sha256:...",
//	    "config": {"env": ["PATH=..."], "working_dir": "/work", "user": "1000"}}],
//	 "config": {...},                              // optional: over the layers' configs
//	 "created": "...", "updated": "..."}
//
// ParseManifest also reads the formats written before it (see there).
type Manifest struct {
	Version     int    `json:"version"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// BlobStore is the spec of the blob store holding the EROFS layers whose
	// Store is empty; empty: the node's default store.
	BlobStore string  `json:"blob_store,omitempty"`
	Layers    []Layer `json:"layers"`
	// Config applies over the merged configs of the layers (for a directory
	// image, its only config).
	Config  *Config    `json:"config,omitempty"`
	Created time.Time  `json:"created,omitzero"`
	Updated *time.Time `json:"updated,omitempty"`
}

// ImageConfig is the manifest's effective config: its layers' configs merged
// base first, then the manifest's own.
func (m Manifest) ImageConfig() *Config {
	var c *Config
	for _, l := range m.Layers {
		c = Merge(c, l.Config)
	}
	return Merge(c, m.Config)
}

// HasWorkspace reports whether the top-most layer is a workspace.
func (m Manifest) HasWorkspace() bool {
	return len(m.Layers) > 1 && m.Layers[len(m.Layers)-1].Role == RoleWorkspace
}

// legacyManifest holds every field of the formats before version 2:
//   - image.json of a directory image: {"name", "lower": [dirs, top-most first],
//     "description"} (scripts/setup.sh writes it);
//   - image.json of a layered image: {"name", "layers": ["sha256:...", base
//     first], "blob_store", "sizes": [...], "indexes": [...], "prefetch_lists": [...]};
//   - an environment manifest of envstore: {"name", "base": {layer}, "toolkits":
//     [{layer}, bottom to top], "workspace": {layer}, "blob_store", "created",
//     "updated"}, each layer {"digest", "size" (-1: unknown), "name", "index",
//     "prefetch_list"}.
type legacyManifest struct {
	Version     int             `json:"version"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Lower       []string        `json:"lower"`
	Layers      json.RawMessage `json:"layers"`
	BlobStore   string          `json:"blob_store"`
	Sizes       []int64         `json:"sizes"`
	Indexes     []string        `json:"indexes"`
	Prefetch    []string        `json:"prefetch_lists"`
	Base        *Layer          `json:"base"`
	Toolkits    []Layer         `json:"toolkits"`
	Workspace   *Layer          `json:"workspace"`
	Config      *Config         `json:"config"`
	Created     time.Time       `json:"created"`
	Updated     *time.Time      `json:"updated"`
}

// ParseManifest reads a manifest in the current format or any earlier one
// (legacyManifest), returning it in the current form: layers base first with
// their roles set. It checks the shape (layers present, digests and
// directories not both, a valid config) but not that layers exist.
func ParseManifest(b []byte) (Manifest, error) {
	var lm legacyManifest
	if err := json.Unmarshal(b, &lm); err != nil {
		return Manifest{}, errdefs.Invalid("manifest: %v", err)
	}
	if lm.Version > ManifestVersion {
		return Manifest{}, errdefs.New(api.CodeConflict, "%v", datafmt.Newer(fmt.Sprintf("environment manifest %q", lm.Name), lm.Version, ManifestVersion))
	}
	m := Manifest{Version: ManifestVersion, Name: lm.Name, Description: lm.Description, BlobStore: lm.BlobStore,
		Config: lm.Config, Created: lm.Created, Updated: lm.Updated}
	workspace := false
	switch {
	case lm.Version >= ManifestVersion:
		if err := json.Unmarshal(lm.Layers, &m.Layers); err != nil {
			return Manifest{}, errdefs.Invalid("manifest layers: %v", err)
		}
		workspace = m.HasWorkspace()
	case lm.Base != nil: // envstore, version 1
		m.Layers = append([]Layer{*lm.Base}, lm.Toolkits...)
		if lm.Workspace != nil {
			m.Layers = append(m.Layers, *lm.Workspace)
			workspace = true
		}
		for i := range m.Layers {
			m.Layers[i].Size = max(m.Layers[i].Size, 0)
		}
	case len(lm.Layers) > 0 && string(lm.Layers) != "null": // layered image.json, version 1
		var digests []string
		if err := json.Unmarshal(lm.Layers, &digests); err != nil {
			return Manifest{}, errdefs.Invalid("manifest layers (version 1: digests): %v", err)
		}
		for i, d := range digests {
			l := Layer{Digest: d}
			if i < len(lm.Sizes) {
				l.Size = lm.Sizes[i]
			}
			if i < len(lm.Indexes) {
				l.Index = lm.Indexes[i]
			}
			if i < len(lm.Prefetch) {
				l.PrefetchList = lm.Prefetch[i]
			}
			m.Layers = append(m.Layers, l)
		}
	default: // directory image.json, version 1: lower is top-most first
		for i := len(lm.Lower) - 1; i >= 0; i-- {
			m.Layers = append(m.Layers, Layer{Dir: lm.Lower[i]})
		}
	}
	if len(m.Layers) == 0 {
		return Manifest{}, errdefs.Invalid("manifest %q has no layers", m.Name)
	}
	Roles(m.Layers, workspace)
	for i, l := range m.Layers {
		if (l.Digest == "") == (l.Dir == "") {
			return Manifest{}, errdefs.Invalid("manifest %q: layer %d needs a digest or a dir, not both", m.Name, i)
		}
		if err := l.Config.Validate(); err != nil {
			return Manifest{}, err
		}
	}
	if err := m.Config.Validate(); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// Marshal encodes m in the current format (indented, with a final newline).
func (m Manifest) Marshal() ([]byte, error) {
	m.Version = ManifestVersion
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// ReadManifest reads and parses the manifest at p (errors wrap os.ErrNotExist
// when it is missing).
func ReadManifest(p string) (Manifest, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return Manifest{}, err
	}
	m, err := ParseManifest(b)
	if err != nil {
		return Manifest{}, fmt.Errorf("%s: %w", p, err)
	}
	return m, nil
}

// WriteManifest writes m to p in the current format, atomically (temp file,
// fsync, rename). It returns the bytes written.
func WriteManifest(p string, m Manifest) (int, error) {
	b, err := m.Marshal()
	if err != nil {
		return 0, err
	}
	return len(b), WriteFileAtomic(p, b)
}

// WriteFileAtomic writes b to p through a synced temp file and a rename.
func WriteFileAtomic(p string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), p)
}
