package agent

import (
	"context"
	"os"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/paths"
	"github.com/dsec-dev/dsec/pkg/api"
)

// EnvPacker builds a committed environment (internal/image/commit implements it with
// the layer builder, the blob store and the environment store).
type EnvPacker interface {
	// Pack builds each of dirs (overlay-format directories, bottom first) into
	// an EROFS layer and composes environment name = base's layers + those
	// layers. The last of dirs is the committed writable layer; its layer is
	// returned as the result's Layer.
	Pack(ctx context.Context, name string, base image.Image, dirs []string) (api.CommitResult, error)
}

// Commit implements session.Sandboxes (DSec's pack_diff): the sandbox is
// frozen while its writable layer is copied (without the excluded paths) to
// DATA_DIR/commits, then the copy is packed into a layer of a new environment
// and removed. The sandbox runs on unchanged.
func (m *Manager) Commit(ctx context.Context, id string, req api.CommitRequest) (api.CommitResult, error) {
	if m.cfg.Packer == nil {
		return api.CommitResult{}, errdefs.New(api.CodeNotImplemented, "this node has no environment store to commit into")
	}
	if !image.ValidName.MatchString(req.Name) {
		return api.CommitResult{}, errdefs.Invalid("invalid environment name %q (lowercase letters, digits, . _ -)", req.Name)
	}
	exclude := append([]string{}, req.Exclude...)
	if !req.NoDefaultExclude {
		exclude = append(append([]string{}, api.DefaultCommitExclude...), req.Exclude...)
	}
	if err := driver.CheckExclude(exclude); err != nil {
		return api.CommitResult{}, err
	}
	if _, err := m.cfg.Images.Resolve(req.Name); err == nil {
		return api.CommitResult{}, errdefs.New(api.CodeAlreadyExists, "image or environment %q already exists", req.Name)
	}
	sb, err := m.get(id)
	if err != nil {
		return api.CommitResult{}, err
	}
	start := time.Now()
	root := paths.New(m.cfg.DataDir).Commits()
	if err := os.MkdirAll(root, 0o700); err != nil {
		return api.CommitResult{}, errdefs.Internal(err, "commit scratch dir")
	}
	tmp, err := os.MkdirTemp(root, id+"-")
	if err != nil {
		return api.CommitResult{}, errdefs.Internal(err, "commit scratch dir")
	}
	defer os.RemoveAll(tmp)
	dir := tmp + "/rw"

	snap, rec, err := sb.lockSnapshotter("commit", sb.drv.Capabilities().Commit)
	if err != nil {
		return api.CommitResult{}, err
	}
	st, err := snap.SnapshotRW(ctx, dir, exclude)
	var dirs []string
	for _, l := range rec.Spec.Layers {
		if copyRole(l.Role) { // a fork child or a resumed sandbox: the earlier copies are part of its file system
			dirs = append(dirs, l.Path)
		}
	}
	sb.mu.Unlock()
	if err != nil {
		return api.CommitResult{}, err
	}
	base, err := m.forkBase(rec, image.Image{Name: rec.Image, Config: rec.ImageConfig})
	if err != nil {
		return api.CommitResult{}, err
	}
	res, err := m.cfg.Packer.Pack(ctx, req.Name, base, append(dirs, dir))
	if err != nil {
		return api.CommitResult{}, err
	}
	res.Exclude = exclude
	res.Entries, res.Whiteouts, res.Opaque, res.Excluded, res.ContentBytes = st.Entries, st.Whiteouts, st.Opaque, st.Excluded, st.Bytes
	res.Millis = float64(time.Since(start).Microseconds()) / 1000
	m.log.Info("committed sandbox", "id", id, "env", req.Name, "layer", res.Layer.Digest, "size", res.Layer.Size, "ms", res.Millis)
	return res, nil
}
