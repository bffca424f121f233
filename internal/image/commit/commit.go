// Package commit turns a sandbox's writable layer into a reusable environment
// (DSec's pack_diff). The agent hands it overlay-format directories (copies of
// writable layers, driver.Snapshotter): each becomes an EROFS layer in the blob
// store with the layer builder, whiteouts (0/0 character devices) and opaque
// directories (trusted.overlay.opaque) kept as they are, which is also how an
// EROFS lower presents them to overlayfs. The new environment is the sandbox's
// environment's layers plus those, written to the environment store; any node
// that reads the same blob store can run it. A directory image base (not a
// blob) is built into a layer once and reused by later commits (layer index
// name "dirimg-<hash of the directory>").
package commit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/envstore"
	"github.com/dsec-dev/dsec/internal/image/layer"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Packer packs directories into layers and composes environments from them.
type Packer struct {
	Blobs blob.Store
	Envs  *envstore.Store
	// TempDir holds images being written (default os.TempDir()).
	TempDir string
}

// Pack implements agent.EnvPacker.
func (p *Packer) Pack(ctx context.Context, name string, base image.Image, dirs []string) (api.CommitResult, error) {
	if len(dirs) == 0 {
		return api.CommitResult{}, errdefs.Invalid("commit: nothing to pack")
	}
	layers, err := p.BlobLayers(ctx, base)
	if err != nil {
		return api.CommitResult{}, err
	}
	for _, d := range dirs {
		r, err := p.build(ctx, d)
		if err != nil {
			return api.CommitResult{}, err
		}
		layers = append(layers, r.Layer)
	}
	image.Roles(layers, true)
	m, err := p.Envs.Create(ctx, image.Manifest{
		Name: name, Description: "committed from " + base.Name, Layers: layers,
		Config: base.Config, Created: time.Now().UTC(),
	})
	if err != nil {
		return api.CommitResult{}, err
	}
	res := api.CommitResult{Image: api.Image{Name: name, Kind: "layered", Config: m.Config.API()}}
	for _, l := range m.Layers {
		il := api.ImageLayer{Digest: l.Digest, Role: l.Role, BlobStore: m.BlobStore, Size: l.Size}
		res.Image.Layers = append(res.Image.Layers, il)
		res.Image.Size += l.Size
	}
	res.Layer = res.Image.Layers[len(res.Image.Layers)-1]
	return res, nil
}

// BlobLayers returns img's layers as blobs, base first: a directory layer
// becomes a layer built once (see dirLayer); mount dirs and roles are cleared.
func (p *Packer) BlobLayers(ctx context.Context, img image.Image) ([]image.Layer, error) {
	var layers []image.Layer
	for _, l := range img.Layers {
		if l.Digest == "" {
			bl, err := p.dirLayer(ctx, l.Dir)
			if err != nil {
				return nil, err
			}
			l = bl
		}
		l.Dir, l.Role = "", ""
		layers = append(layers, l)
	}
	return layers, nil
}

func (p *Packer) build(ctx context.Context, dir string) (layer.Result, error) {
	r, err := layer.Build(ctx, layer.Source{Kind: "dir", Arg: dir}, p.Blobs, layer.Options{TempDir: p.TempDir})
	if err != nil {
		return r, errdefs.Internal(err, "pack %s", dir)
	}
	return r, nil
}

// dirLayer returns a directory image's tree as a layer: the one built by an
// earlier commit if it is still in the index and the blob store, else a new one.
func (p *Packer) dirLayer(ctx context.Context, dir string) (image.Layer, error) {
	sum := sha256.Sum256([]byte(dir))
	name := "dirimg-" + hex.EncodeToString(sum[:6])
	src := "dir:" + dir
	if nl, err := p.Envs.Layer(ctx, name); err == nil && nl.Source == src {
		if _, err := p.Blobs.Stat(ctx, nl.Digest); err == nil {
			return nl.Layer, nil
		}
	}
	r, err := p.build(ctx, dir)
	if err != nil {
		return image.Layer{}, err
	}
	if err := p.Envs.PutLayer(ctx, envstore.Named(name, src, r.Layer)); err != nil {
		return image.Layer{}, err
	}
	r.Layer.Name = name
	return r.Layer, nil
}
