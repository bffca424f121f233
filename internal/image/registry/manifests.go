package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/dsec-dev/dsec/internal/errdefs"
)

// Manifests reads manifest bodies by digest for ResolveShared: fetch reads
// manifest dg from the registry (its digest verified); a Manifests may
// answer from elsewhere (a blob store the nodes of a cluster share, where
// one node stored what it fetched) and must return a body whose digest is
// dg.
type Manifests func(ctx context.Context, dg v1.Hash, fetch func(context.Context) ([]byte, error)) ([]byte, error)

// maxManifestBytes bounds a manifest body read from a registry.
const maxManifestBytes = 4 << 20

// ResolveShared is Resolve reading manifest bodies through ms: a tag is
// resolved to its digest with a HEAD (a GET when the registry refuses HEAD
// or omits Docker-Content-Digest), a digest reference is taken as it is,
// and the manifest (and, for an index, the image manifest for the client's
// platform) is read by digest through ms. The config and layers are read
// from the endpoint that answered, as with Resolve. A nil ms is Resolve.
func (c *Client) ResolveShared(ctx context.Context, ref name.Reference, ms Manifests) (Resolved, error) {
	return c.resolve(ctx, ref, ms)
}

// resolveShared resolves ref at repo (an endpoint) reading manifest bodies
// through ms.
func (c *Client) resolveShared(ctx context.Context, ref, at name.Reference, repo name.Repository, host string, opts []remote.Option, pl *remote.Puller, ms Manifests) (Resolved, error) {
	withCtx := func(ctx context.Context) []remote.Option { return append(slices.Clip(opts), remote.WithContext(ctx)) }
	var dg v1.Hash
	var fetched []byte // manifest dg's body, when resolving the tag fetched it
	if d, ok := at.(name.Digest); ok {
		h, err := v1.NewHash(d.DigestStr())
		if err != nil {
			return Resolved{}, errdefs.Invalid("image reference %q: %v", ref, err)
		}
		dg = h
	} else if hd, err := remote.Head(at, withCtx(ctx)...); err == nil {
		dg = hd.Digest
	} else {
		if ctx.Err() != nil {
			return Resolved{}, classify(err, ref.String(), host)
		}
		// HEAD refused or without the digest: the body says it.
		desc, err := remote.Get(at, withCtx(ctx)...)
		if err != nil {
			return Resolved{}, classify(err, ref.String(), host)
		}
		dg, fetched = desc.Digest, desc.Manifest
	}
	tagDg := dg
	byDigest := func(dg v1.Hash) ([]byte, error) {
		b, err := ms(ctx, dg, func(ctx context.Context) ([]byte, error) {
			if fetched != nil && dg == tagDg {
				return fetched, nil
			}
			desc, err := remote.Get(repo.Digest(dg.String()), withCtx(ctx)...)
			if err != nil {
				return nil, err
			}
			if len(desc.Manifest) > maxManifestBytes {
				return nil, errdefs.Invalid("manifest %s: %d bytes (at most %d)", dg, len(desc.Manifest), maxManifestBytes)
			}
			return desc.Manifest, nil
		})
		if err != nil {
			return nil, classify(err, ref.String()+" ("+dg.String()+")", host)
		}
		return b, nil
	}
	raw, err := byDigest(dg)
	if err != nil {
		return Resolved{}, err
	}
	mt := mediaTypeOf(raw)
	imgRaw, imgDg := raw, dg
	if mt.IsIndex() {
		idx, err := v1.ParseIndexManifest(bytes.NewReader(raw))
		if err != nil {
			return Resolved{}, errdefs.Invalid("image index %s: %v", dg, err)
		}
		d, err := c.pickPlatform(dg, idx)
		if err != nil {
			return Resolved{}, err
		}
		if imgRaw, err = byDigest(d.Digest); err != nil {
			return Resolved{}, err
		}
		imgDg = d.Digest
		if mt = mediaTypeOf(imgRaw); !mt.IsImage() {
			return Resolved{}, errdefs.Invalid("image index %s: manifest %s is a %s, not an image", dg, imgDg, mt)
		}
	}
	if !mt.IsImage() {
		return Resolved{}, errdefs.Invalid("image %s: manifest %s is a %s, not an image", ref, imgDg, mt)
	}
	src := Source{Ref: repo.Digest(dg.String()), opts: opts, puller: pl}
	m, err := v1.ParseManifest(bytes.NewReader(imgRaw))
	if err != nil {
		return Resolved{}, errdefs.Invalid("image %s: manifest %s: %v", ref, imgDg, err)
	}
	img, err := partial.CompressedToImage(&manifestImage{ctx: ctx, src: src, raw: imgRaw, mt: mt, m: m})
	if err != nil {
		return Resolved{}, errdefs.Invalid("image %s: manifest %s: %v", ref, imgDg, err)
	}
	return Resolved{Ref: ref, Digest: dg, Image: img, Source: src}, nil
}

// mediaTypeOf is a manifest body's media type: its mediaType field, else
// an OCI index if it lists manifests, else an OCI image manifest.
func mediaTypeOf(raw []byte) types.MediaType {
	var probe struct {
		MediaType types.MediaType `json:"mediaType"`
		Manifests json.RawMessage `json:"manifests"`
	}
	_ = json.Unmarshal(raw, &probe)
	switch {
	case probe.MediaType != "":
		return probe.MediaType
	case probe.Manifests != nil:
		return types.OCIImageIndex
	}
	return types.OCIManifestSchema1
}

// manifestImage is an image whose manifest is at hand: its config and layers
// are read from src (under ctx, the resolve's, as a remote image's are).
type manifestImage struct {
	ctx context.Context
	src Source
	raw []byte
	mt  types.MediaType
	m   *v1.Manifest
}

var _ partial.CompressedImageCore = (*manifestImage)(nil)

func (i *manifestImage) RawManifest() ([]byte, error)        { return i.raw, nil }
func (i *manifestImage) MediaType() (types.MediaType, error) { return i.mt, nil }

func (i *manifestImage) RawConfigFile() ([]byte, error) {
	l, err := i.src.Layer(i.ctx, i.m.Config.Digest)
	if err != nil {
		return nil, err
	}
	rc, err := l.Compressed() // verified against the digest as it is read
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func (i *manifestImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	for _, d := range i.m.Layers {
		if d.Digest == h {
			return &manifestLayer{img: i, desc: d}, nil
		}
	}
	return nil, fmt.Errorf("manifest has no layer %s", h)
}

// manifestLayer is a layer as its image's manifest describes it; its blob is
// fetched only when read.
type manifestLayer struct {
	img  *manifestImage
	desc v1.Descriptor
}

func (l *manifestLayer) Digest() (v1.Hash, error)            { return l.desc.Digest, nil }
func (l *manifestLayer) Size() (int64, error)                { return l.desc.Size, nil }
func (l *manifestLayer) MediaType() (types.MediaType, error) { return l.desc.MediaType, nil }

func (l *manifestLayer) Compressed() (io.ReadCloser, error) {
	rl, err := l.img.src.Layer(l.img.ctx, l.desc.Digest)
	if err != nil {
		return nil, err
	}
	return rl.Compressed()
}
