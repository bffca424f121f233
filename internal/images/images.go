// Package images resolves an image name to the read-only lower directories of a
// sandbox's root file system. Today an image is a directory tree on local disk
// (made by scripts/setup.sh); the layered EROFS image service replaces the mechanism
// behind the same seam: a name in, a list of lower directories out.
package images

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"

	"github.com/dsec-dev/dsec/internal/errdefs"
)

// Image is one resolved image.
type Image struct {
	Name        string   `json:"name"`
	Lower       []string `json:"lower"` // absolute paths, top-most first
	Description string   `json:"description,omitempty"`
}

// manifest is DIR/NAME/image.json; its lower entries are relative to DIR/NAME.
type manifest struct {
	Name        string   `json:"name"`
	Lower       []string `json:"lower"`
	Description string   `json:"description,omitempty"`
}

var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// Store is a directory of images: DIR/NAME/image.json plus the trees it names.
type Store struct {
	Dir     string
	Default string // the image used when a request names none
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
		return Image{}, errdefs.NotFound("image %q not found in %s (run `make setup` to build the default images)", name, s.Dir)
	}
	if err != nil {
		return Image{}, errdefs.Internal(err, "read image %q", name)
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Image{}, errdefs.Internal(err, "parse image %q manifest", name)
	}
	if len(m.Lower) == 0 {
		return Image{}, errdefs.Internal(fmt.Errorf("no lower directories"), "image %q", name)
	}
	img := Image{Name: name, Description: m.Description}
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

// List returns the names of the images in the store, sorted.
func (s *Store) List() []string {
	ents, _ := os.ReadDir(s.Dir)
	var names []string
	for _, e := range ents {
		if _, err := os.Stat(filepath.Join(s.Dir, e.Name(), "image.json")); err == nil {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names
}
