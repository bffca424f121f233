package layer

import (
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/pkg/api"
)

// addOCI flattens an OCI/Docker image (all its layers, in order, applying whiteouts
// and opaque directories: go-containerregistry's mutate.Extract) into the writer.
func (b *builder) addOCI(src Source) error {
	img, err := openImage(b, src)
	if err != nil {
		return err
	}
	if b.config, err = imageConfig(img); err != nil {
		return err
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	if err := b.addTar(rc); err != nil {
		if src.Kind == "oci" && !ctxDone(err) && !strings.HasPrefix(err.Error(), "tar:") {
			return blob.Unavailable(err, "pull %s", src.Arg)
		}
		return err
	}
	return nil
}

// imageConfig is the part of img's config dsec keeps (nil: none set).
func imageConfig(img v1.Image) (*image.Config, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, errdefs.Invalid("image config: %v", err)
	}
	if cf == nil {
		return nil, nil
	}
	c := &image.Config{Env: cf.Config.Env, WorkingDir: cf.Config.WorkingDir, User: cf.Config.User,
		Entrypoint: cf.Config.Entrypoint, Cmd: cf.Config.Cmd}
	if c.IsZero() {
		return nil, nil
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func platform() v1.Platform { return v1.Platform{OS: "linux", Architecture: runtime.GOARCH} }

func openImage(b *builder, src Source) (v1.Image, error) {
	switch src.Kind {
	case "oci":
		ref, err := name.ParseReference(src.Arg)
		if err != nil {
			return nil, errdefs.Invalid("image reference %q: %v", src.Arg, err)
		}
		opts := append([]remote.Option{remote.WithContext(b.ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain), remote.WithPlatform(platform())}, b.opts.Remote...)
		img, err := remote.Image(ref, opts...)
		if err != nil {
			return nil, classifyRemote(err, src.Arg)
		}
		return img, nil
	case "oci-layout":
		p, sel, _ := strings.Cut(src.Arg, "@")
		idx, err := layout.ImageIndexFromPath(p)
		if err != nil {
			return nil, errdefs.Invalid("oci layout %s: %v", p, err)
		}
		return pickFromIndex(idx, sel)
	case "docker-archive":
		p, tag, _ := strings.Cut(src.Arg, "@")
		var t *name.Tag
		if tag != "" {
			tt, err := name.NewTag(tag)
			if err != nil {
				return nil, errdefs.Invalid("docker-archive tag %q: %v", tag, err)
			}
			t = &tt
		}
		img, err := tarball.ImageFromPath(p, t)
		if err != nil {
			return nil, errdefs.Invalid("docker archive %s: %v", p, err)
		}
		return img, nil
	}
	return nil, errdefs.Invalid("source kind %q", src.Kind)
}

// pickFromIndex chooses the image sel names (a digest or an
// org.opencontainers.image.ref.name annotation), else the one image, else the one
// for this platform; nested indexes are followed.
func pickFromIndex(idx v1.ImageIndex, sel string) (v1.Image, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, errdefs.Invalid("oci index: %v", err)
	}
	var cands []v1.Descriptor
	for _, d := range m.Manifests {
		if sel != "" {
			if d.Digest.String() == sel || d.Annotations["org.opencontainers.image.ref.name"] == sel {
				cands = append(cands, d)
			}
			continue
		}
		if d.Platform == nil || d.Platform.OS == "" || (d.Platform.OS == "linux" && d.Platform.Architecture == runtime.GOARCH) {
			cands = append(cands, d)
		}
	}
	if len(cands) == 0 && sel == "" && len(m.Manifests) == 1 {
		cands = m.Manifests
	}
	if len(cands) == 0 {
		return nil, errdefs.NotFound("oci layout: no image matches %q for linux/%s", sel, runtime.GOARCH)
	}
	d := cands[0]
	if d.MediaType.IsIndex() {
		sub, err := idx.ImageIndex(d.Digest)
		if err != nil {
			return nil, errdefs.Invalid("oci index %s: %v", d.Digest, err)
		}
		return pickFromIndex(sub, "")
	}
	img, err := idx.Image(d.Digest)
	if err != nil {
		return nil, errdefs.Invalid("oci image %s: %v", d.Digest, err)
	}
	return img, nil
}

// classifyRemote sorts a registry error by the registry's answer (its HTTP
// status and error codes), never by the message's text alone: a message
// quotes the registry's URL, whose port may well contain "404".
func classifyRemote(err error, ref string) error {
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.StatusCode {
		case http.StatusNotFound:
			return errdefs.NotFound("image %s not found in its registry: %v", ref, err)
		case http.StatusUnauthorized, http.StatusForbidden:
			return errdefs.Wrap(api.CodeUnauthorized, err, "registry refused %s", ref)
		}
		for _, d := range te.Errors {
			switch d.Code {
			case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode:
				return errdefs.NotFound("image %s not found in its registry: %v", ref, err)
			case transport.UnauthorizedErrorCode, transport.DeniedErrorCode:
				return errdefs.Wrap(api.CodeUnauthorized, err, "registry refused %s", ref)
			}
		}
	}
	return blob.Unavailable(fmt.Errorf("%w", err), "registry for %s unreachable", ref)
}
