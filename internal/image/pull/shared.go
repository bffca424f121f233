package pull

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/registry"
	"github.com/dsec-dev/dsec/pkg/api"
)

// maxManifestBytes bounds a manifest body read back from the blob store.
const maxManifestBytes = 4 << 20

// manifests reads manifest bodies through the shared blob store (nil
// without Claims: each node fetches the manifest it resolves).
func (p *Puller) manifests() registry.Manifests {
	if p.Claims == nil {
		return nil
	}
	return func(ctx context.Context, dg v1.Hash, fetch func(context.Context) ([]byte, error)) ([]byte, error) {
		return p.sharedBlob(ctx, "manifest", dg.String(), maxManifestBytes, fetch)
	}
}

// sharedBlob is blob dg (a manifest or an image config, at most max bytes)
// with Claims: one node of the cluster fetches it from the registry, as it
// does a layer, and stores it in the blob store by its digest; the others
// read it there. What is fetched is verified against dg before it is
// stored.
func (p *Puller) sharedBlob(ctx context.Context, what, dg string, max int64, fetch func(context.Context) ([]byte, error)) ([]byte, error) {
	stored := func() ([]byte, error) {
		rc, err := p.Blobs.Open(ctx, dg)
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		b, err := io.ReadAll(io.LimitReader(rc, max))
		if err != nil {
			return nil, err
		}
		if digestOf(b) != dg {
			return nil, fmt.Errorf("%s %s in the blob store: %w", what, dg, blob.ErrDigestMismatch)
		}
		return b, nil
	}
	fetchVerified := func() ([]byte, error) {
		b, err := fetch(ctx)
		if err != nil {
			return nil, err
		}
		if got := digestOf(b); got != dg {
			return nil, errdefs.Wrap(api.CodeUnavailable, blob.ErrDigestMismatch,
				"%s %s: the registry sent content whose digest is %s: refused, nothing stored", what, dg, got)
		}
		return b, nil
	}
	if b, err := stored(); err == nil {
		return b, nil
	}
	have := func(image.Layer) bool {
		_, err := p.Blobs.Stat(ctx, dg)
		return err == nil
	}
	got, done, err := p.Claims.Claim(ctx, dg, have)
	if err != nil {
		return nil, err
	}
	if got != nil {
		if b, err := stored(); err == nil {
			return b, nil
		}
		return fetchVerified() // gone meanwhile: this node fetches it
	}
	raw, err := fetchVerified()
	if err == nil {
		err = p.Blobs.Put(ctx, dg, bytes.NewReader(raw), int64(len(raw)))
	}
	var made *image.Layer
	if err == nil {
		made = &image.Layer{Digest: dg, Size: int64(len(raw))}
	}
	if rerr := done(made); rerr != nil {
		p.log().Warn(what+" claim", "digest", dg, "err", rerr)
	}
	if err != nil {
		return nil, err
	}
	return raw, nil
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
