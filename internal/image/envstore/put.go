package envstore

import (
	"context"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Create writes a new environment from a complete manifest (its layers by
// digest, base first, with roles and configs as given). Unlike Compose it
// never replaces: an existing name is already_exists. Each layer must be in
// the store's blob store. Commit (internal/image/commit) composes environments so.
func (s *Store) Create(ctx context.Context, m image.Manifest) (image.Manifest, error) {
	if err := checkName("environment", m.Name); err != nil {
		return m, err
	}
	if len(m.Layers) == 0 {
		return m, errdefs.Invalid("environment %q: no layers", m.Name)
	}
	for _, l := range m.Layers {
		if l.Digest == "" || l.Dir != "" {
			return m, errdefs.Invalid("environment %q: every layer must be a blob (digest, no dir)", m.Name)
		}
		if s.Blobs != nil {
			if _, err := s.Blobs.Stat(ctx, l.Digest); err != nil {
				return m, err
			}
		}
	}
	if m.BlobStore == "" {
		m.BlobStore = s.Spec
	}
	if m.Created.IsZero() {
		m.Created = time.Now().UTC()
	}
	// A conditional write on "absent": two commits to one name cannot both win.
	_, err := s.State.PutEnv(ctx, m, Cond{Version: 0})
	if isChanged(err) {
		return m, errdefs.New(api.CodeAlreadyExists, "environment %q already exists", m.Name)
	}
	return m, err
}
