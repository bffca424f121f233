// Package registry reaches OCI registries as containerd does: references
// normalised as Docker does (python:3.12 → docker.io/library/python:3.12),
// anonymous, bearer-token and basic auth with credentials from a Docker
// config.json or given with a call (WithCredentials), mirrors and rewrites from containerd hosts.toml files
// (DIR/HOST/hosts.toml), plain HTTP only for registries configured as
// insecure, and retries with back-off on 429 and 5xx answers honouring
// Retry-After. Every registry error is classified (errdefs): a malformed
// reference is invalid_argument, a missing repository, tag or platform
// not_found, refused credentials permission_denied, a registry that cannot be
// reached unavailable. Nothing here is global: a Client holds its Config.
package registry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/dsec-dev/dsec/internal/errdefs"
)

// Config says how a node reaches registries.
type Config struct {
	// DockerConfig is the path of a Docker config.json whose "auths" give
	// credentials per registry ("": anonymous only).
	DockerConfig string
	// HostsDir is a containerd certs.d-style directory: HostsDir/HOST/hosts.toml
	// (HOST as in the reference, e.g. docker.io; _default for any other) lists
	// the mirrors tried in order before the registry itself ("": none).
	HostsDir string
	// Insecure lists registries (HOST[:PORT]) reached over plain HTTP; any other
	// is HTTPS only. A hosts.toml host with an http:// URL is insecure too.
	Insecure []string
	// Retries is how many times a request answered 429 or 5xx (or not at all)
	// is retried (default 4); MinBackoff and MaxBackoff bound the wait between
	// tries (defaults 200ms and 10s); a Retry-After answer is honoured up to
	// MaxBackoff.
	Retries    int
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// Transport is the base HTTP transport (default: a clone of
	// http.DefaultTransport).
	Transport http.RoundTripper
	// Platform is the platform picked from a multi-platform index (default
	// linux/GOARCH).
	Platform *v1.Platform
}

// Client reaches registries under one Config.
type Client struct {
	cfg Config
	// plainHTTP holds hosts reached over plain HTTP because a hosts.toml
	// names them with http:// (besides Config.Insecure).
	plainHTTP sync.Map
	keys      *keychain
	hosts     *hostsDir
	rt        http.RoundTripper
}

// New returns a client; the Docker config is read now (an unreadable one is
// an error, a missing one means anonymous).
func New(cfg Config) (*Client, error) {
	if cfg.Retries == 0 {
		cfg.Retries = 4
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 200 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 10 * time.Second
	}
	if cfg.Transport == nil {
		cfg.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	if cfg.Platform == nil {
		cfg.Platform = &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	}
	keys, err := loadKeychain(cfg.DockerConfig)
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, keys: keys, hosts: &hostsDir{dir: cfg.HostsDir}}
	c.rt = &retryTransport{inner: &schemeGuard{inner: cfg.Transport, insecure: c.insecure}, cfg: &c.cfg}
	return c, nil
}

// Platform is the platform the client picks from an index.
func (c *Client) Platform() v1.Platform { return *c.cfg.Platform }

// Parse parses an image reference, normalising short names as Docker does.
func Parse(ref string) (name.Reference, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, errdefs.Invalid("image reference %q: %v", ref, err)
	}
	return r, nil
}

// Normalized is ref's full name as Docker shows it: Docker Hub is
// docker.io (docker.io/library/python:3.12), whatever the library calls it.
func Normalized(ref name.Reference) string {
	n := ref.Name()
	if rest, ok := strings.CutPrefix(n, name.DefaultRegistry+"/"); ok {
		return "docker.io/" + rest
	}
	return n
}

// IsReference reports whether s can only be a registry reference, never a
// local image or environment name: it names a registry or repository path
// (a '/'), a tag (':') or a digest ('@').
func IsReference(s string) bool {
	for _, c := range s {
		if c == '/' || c == ':' || c == '@' {
			return true
		}
	}
	return false
}

func (c *Client) insecure(host string) bool {
	if slices.Contains(c.cfg.Insecure, host) {
		return true
	}
	_, ok := c.plainHTTP.Load(host)
	return ok
}

// Source is where a resolved image is read from: the endpoint (the registry
// itself or a mirror) that answered, and the options to read it with.
type Source struct {
	// Ref is the reference rewritten to the endpoint (its registry and
	// repository), by the resolved digest.
	Ref    name.Digest
	opts   []remote.Option
	puller *remote.Puller // the resolve's: its registry sessions (auth) serve Layer
}

// Layer is blob dg of s's repository, fetched under ctx: its end stops the
// transfer, whatever context s was resolved under.
func (s Source) Layer(ctx context.Context, dg v1.Hash) (v1.Layer, error) {
	if s.puller == nil {
		return nil, errdefs.Internal(errors.New("no registry source"), "layer %s", dg)
	}
	l, err := s.puller.Layer(ctx, s.Ref.Context().Digest(dg.String()))
	if err != nil {
		return nil, classify(err, dg.String(), s.Ref.RegistryStr())
	}
	return l, nil
}

// Options are the go-containerregistry options to read from s (auth,
// transport, platform), with ctx.
func (s Source) Options(ctx context.Context) []remote.Option {
	return append(slices.Clip(s.opts), remote.WithContext(ctx))
}

// Resolved is a reference resolved to a digest.
type Resolved struct {
	// Ref is the normalised reference as given (docker.io/library/python:3.12).
	Ref name.Reference
	// Digest is the digest the reference resolved to: of the index if the
	// reference names one (the same digest every node resolves), else of
	// the manifest.
	Digest v1.Hash
	// Image is the image for this client's platform (its manifest, config and
	// layers are read from Source).
	Image  v1.Image
	Source Source
}

// Resolve resolves ref (a tag or a digest) to a digest and the image for the
// client's platform, trying ref's mirrors in order, then its registry.
func (c *Client) Resolve(ctx context.Context, ref name.Reference) (Resolved, error) {
	return c.resolve(ctx, ref, nil)
}

func (c *Client) resolve(ctx context.Context, ref name.Reference, ms Manifests) (Resolved, error) {
	return tryEndpoints(ctx, c, ref.Context().Registry, func(ep endpoint) (Resolved, error) {
		return c.resolveAt(ctx, ref, ep, ms)
	})
}

// tryEndpoints calls try with reg's endpoints in order (its mirrors, then
// the registry) until one answers. When none does, the registry's own
// answer (the last endpoint) decides the error's class, unless it only
// failed to answer and a mirror said more; the others are joined to it.
func tryEndpoints[T any](ctx context.Context, c *Client, reg name.Registry, try func(endpoint) (T, error)) (T, error) {
	var zero T
	eps, err := c.hosts.endpoints(reg)
	if err != nil {
		return zero, err
	}
	var errs []error
	for _, ep := range eps {
		r, err := try(ep)
		if err == nil {
			return r, nil
		}
		if ctx.Err() != nil {
			return zero, err
		}
		errs = append(errs, err)
	}
	last := errs[len(errs)-1]
	for _, e := range errs {
		if errdefs.CodeOf(last) == "unavailable" && errdefs.CodeOf(e) != "unavailable" {
			last = e
		}
	}
	if len(errs) > 1 {
		return zero, fmt.Errorf("%w (tried %d endpoints: %v)", last, len(errs), errors.Join(errs[:len(errs)-1]...))
	}
	return zero, last
}

func (c *Client) resolveAt(ctx context.Context, ref name.Reference, ep endpoint, ms Manifests) (Resolved, error) {
	reg, err := name.NewRegistry(ep.host, c.regOpts(ep)...)
	if err != nil {
		return Resolved{}, errdefs.Invalid("mirror %s: %v", ep.host, err)
	}
	repo := reg.Repo(ref.Context().RepositoryStr())
	var at name.Reference
	switch r := ref.(type) {
	case name.Digest:
		at = repo.Digest(r.DigestStr())
	case name.Tag:
		at = repo.Tag(r.TagStr())
	default:
		return Resolved{}, errdefs.Invalid("image reference %q", ref)
	}
	opts := []remote.Option{
		remote.WithAuthFromKeychain(c.authFor(ctx, ref, ep)), remote.WithTransport(c.rt), remote.WithPlatform(*c.cfg.Platform),
		// Retries are the client's (retryTransport), which honour Retry-After.
		remote.WithRetryStatusCodes(), remote.WithRetryPredicate(func(error) bool { return false }),
	}
	pl, err := remote.NewPuller(opts...)
	if err != nil {
		return Resolved{}, errdefs.Internal(err, "registry client")
	}
	opts = append(opts, remote.Reuse(pl))
	if ms != nil {
		return c.resolveShared(ctx, ref, at, repo, ep.host, opts, pl, ms)
	}
	desc, err := remote.Get(at, append(slices.Clip(opts), remote.WithContext(ctx))...)
	if err != nil {
		return Resolved{}, classify(err, ref.String(), ep.host)
	}
	img, err := c.platformImage(desc)
	if err != nil {
		return Resolved{}, err
	}
	return Resolved{Ref: ref, Digest: desc.Digest, Image: img,
		Source: Source{Ref: repo.Digest(desc.Digest.String()), opts: opts, puller: pl}}, nil
}

// Check asks ref's registry (its mirrors first, as Resolve does) whether
// this caller may read manifest ref: a HEAD by digest (a GET where HEAD is
// refused) with the credentials ctx carries for the registry, else the
// node's. It answers nil, or the registry's refusal classified as Resolve's
// (permission_denied, not_found, unavailable).
func (c *Client) Check(ctx context.Context, ref name.Digest) error {
	_, err := tryEndpoints(ctx, c, ref.Context().Registry, func(ep endpoint) (struct{}, error) {
		reg, err := name.NewRegistry(ep.host, c.regOpts(ep)...)
		if err != nil {
			return struct{}{}, errdefs.Invalid("mirror %s: %v", ep.host, err)
		}
		at := reg.Repo(ref.Context().RepositoryStr()).Digest(ref.DigestStr())
		opts := []remote.Option{remote.WithAuthFromKeychain(c.authFor(ctx, ref, ep)), remote.WithTransport(c.rt),
			remote.WithContext(ctx), remote.WithRetryStatusCodes(), remote.WithRetryPredicate(func(error) bool { return false })}
		if _, err = remote.Head(at, opts...); err != nil && !isAuthOrMissing(err) {
			_, err = remote.Get(at, opts...)
		}
		if err != nil {
			return struct{}{}, classify(err, ref.String(), ep.host)
		}
		return struct{}{}, nil
	})
	return err
}

// isAuthOrMissing: the registry refused err's request for its credentials
// or has no such manifest (not an answer a GET would change).
func isAuthOrMissing(err error) bool {
	var te *transport.Error
	if !errors.As(err, &te) {
		return false
	}
	switch te.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
		return true
	}
	return false
}

func (c *Client) regOpts(ep endpoint) []name.Option {
	opts := []name.Option{name.StrictValidation}
	if ep.insecure {
		c.plainHTTP.Store(ep.host, true)
	}
	if c.insecure(ep.host) {
		opts = append(opts, name.Insecure)
	}
	return opts
}

// platformImage is desc's image: itself, or an index's image for the
// client's platform (not_found naming the platforms it has otherwise).
func (c *Client) platformImage(desc *remote.Descriptor) (v1.Image, error) {
	if !desc.MediaType.IsIndex() {
		img, err := desc.Image()
		if err != nil {
			return nil, errdefs.Invalid("image %s: %v", desc.Digest, err)
		}
		return img, nil
	}
	idx, err := desc.ImageIndex()
	if err != nil {
		return nil, errdefs.Invalid("image index %s: %v", desc.Digest, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, classify(err, desc.Digest.String(), "")
	}
	d, err := c.pickPlatform(desc.Digest, m)
	if err != nil {
		return nil, err
	}
	img, err := idx.Image(d.Digest)
	if err != nil {
		return nil, classify(err, d.Digest.String(), "")
	}
	return img, nil
}

// pickPlatform is the image manifest of index dg (m) for the client's
// platform (not_found naming the platforms it has otherwise).
func (c *Client) pickPlatform(dg v1.Hash, m *v1.IndexManifest) (v1.Descriptor, error) {
	var have []string
	for _, d := range m.Manifests {
		if d.Platform == nil {
			continue
		}
		if d.Platform.Satisfies(*c.cfg.Platform) && d.MediaType.IsImage() {
			return d, nil
		}
		have = append(have, d.Platform.String())
	}
	return v1.Descriptor{}, errdefs.NotFound("image index %s has no image for platform %s (it has: %v)", dg, c.cfg.Platform, have)
}
