// Package pull makes images named by registry reference into dsec
// environments on a node: the reference is resolved to a digest (the
// registry's answer at that moment; a digest reference is already pinned),
// the manifest for the node's platform, its config and each layer are
// fetched once per digest per node (concurrent pulls of the same image or
// layer share one fetch; with Claims, the manifests, the config and each
// layer once for the nodes sharing the blob store, a tag being resolved with
// a HEAD), each layer is verified against its digest and its
// diff ID and converted into dsec's EROFS layer format (overlayfs whiteouts,
// internal/image/layer.BuildOCILayer) stored in the blob store, so images sharing
// layers convert them once. The image is then those layers in order, stacked
// by overlayfs, with the image config Docker honours.
//
// State on the node (Dir): layers/HEX.json maps an OCI layer digest to its
// EROFS layer, images/HEX.json is the environment of an image digest,
// refs.json the references pulled and what they resolved to. Every file is
// written to a temporary name and renamed, and a record is written only
// after what it names is in the blob store: nothing half-written is visible.
package pull

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/layer"
	"github.com/dsec-dev/dsec/internal/image/registry"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Puller pulls images into a node's blob store.
type Puller struct {
	Registry *registry.Client
	Blobs    blob.Store
	// Spec names Blobs (blob.ParseSpec); the environments' layers name it.
	Spec string
	// Dir holds the node's records (see the package comment).
	Dir string
	// TempDir holds layers being fetched and converted (default Dir/tmp).
	TempDir string
	Log     *slog.Logger

	// Budget is the most bytes of layer blobs the cache keeps (0: no
	// limit): a pull that puts it over evicts the least recently used images
	// no sandbox uses (Evict); an image whose layers alone are larger is
	// refused (resource_exhausted).
	Budget int64
	// Grace keeps an image used this recently from eviction (a create that
	// resolved it may not have its sandbox yet).
	Grace time.Duration
	// InUse says which sandboxes use which image digest (nil: none do).
	InUse InUseFunc
	// Claims, when the node shares Blobs with other nodes (a cluster), makes
	// each layer fetched from a registry by one node only (nil: this node
	// fetches what it lacks).
	Claims LayerClaims
	// SharedBlobs says other nodes read Blobs (a shared blob store, whose
	// layers their sandboxes may run on unseen by this node): removals
	// (Remove, Evict, Clean) drop this node's records but never delete a blob.
	SharedBlobs bool
	// GC, with a shared blob store under a byte budget, holds the blobs of
	// this node's pulls and creates for the cluster's evictions and evicts
	// after a pull that fetched (nil: no budget on the shared store).
	GC *StoreGC

	flights flights
	refsMu  sync.Mutex
	// gcMu orders removals against uses and pins (cache.go).
	gcMu   sync.Mutex
	pinned map[string]int // OCI layer digest → pulls using its record
	hook   func(point string)
	prog   progress
	// LayersFetched counts layer blobs fetched from a registry.
	LayersFetched atomic.Int64
	// credPulls numbers the pulls with credentials of their own.
	credPulls atomic.Int64
}

// Pulled is an image made into an environment.
type Pulled struct {
	// Ref is the normalised reference (docker.io/library/python:3.12).
	Ref string
	// Digest is what Ref resolved to.
	Digest string
	// Image is the environment (Name is the reference pinned to Digest).
	Image image.Image
}

// pullTries bounds the pulls of one image whose blobs an eviction of the
// shared blob store took as it was pulled.
const pullTries = 3

// Pull resolves ref and makes its image available on this node. With GC,
// the image's blobs are held for the cluster's evictions (for GC.Grace,
// then while a sandbox uses them); blobs evicted before the hold are
// fetched again.
func (p *Puller) Pull(ctx context.Context, ref string) (Pulled, error) {
	for try := 1; ; try++ {
		pl, err := p.pullOnce(ctx, ref)
		if err != nil || p.GC == nil {
			return pl, err
		}
		release, missing, err := p.GC.Hold(ctx, blobsOf(pl.Image.Layers))
		if err != nil {
			return Pulled{}, err
		}
		release()
		if len(missing) == 0 {
			return pl, nil
		}
		if try == pullTries {
			return Pulled{}, errdefs.New(api.CodeUnavailable, "image %s: its layers left the shared blob store while it was pulled (%d tries)", pl.Ref, try)
		}
		p.log().Info("image's blobs were evicted from the shared blob store: fetching them again", "ref", pl.Ref, "digest", pl.Digest, "missing", len(missing))
		p.forgetImage(pl.Digest)
	}
}

// blobsOf lists the blobs of layers (each EROFS blob and its chunk index).
func blobsOf(ls []image.Layer) []string {
	var out []string
	for _, l := range ls {
		for _, d := range []string{l.Digest, l.Index} {
			if d != "" {
				out = append(out, d)
			}
		}
	}
	return out
}

// forgetImage drops image dg's record (its blobs left the shared store): the
// next pull makes it again.
func (p *Puller) forgetImage(dg string) {
	p.gcMu.Lock()
	defer p.gcMu.Unlock()
	_ = os.Remove(p.imagePath(dg))
}

func (p *Puller) pullOnce(ctx context.Context, ref string) (Pulled, error) {
	r, err := registry.Parse(ref)
	if err != nil {
		return Pulled{}, err
	}
	norm := registry.Normalized(r)
	creds := registry.HasCredentials(ctx, r)
	if d, ok := r.(name.Digest); ok {
		// Pinned: the node's record answers without the registry, unless
		// the image was fetched with a request's own credentials: then the
		// registry says whether this create's may read it.
		if m, err := p.useImage(d.DigestStr()); err == nil {
			if p.isPrivate(d.DigestStr()) && !registry.AccessChecked(ctx) {
				if err := p.Registry.Check(ctx, d); err != nil {
					return Pulled{}, err
				}
			}
			return p.pulled(norm, d.DigestStr(), m)
		}
	}
	// Creates of one reference at once share one resolution and one pull;
	// a pull with credentials of its own (registry.WithCredentials) resolves
	// alone, so that neither answers for the other, and reads its manifests
	// from the registry, never from the shared blob store (where a node
	// without those credentials could read them by digest).
	key := "ref\x00" + norm
	ms := p.manifests()
	if creds {
		key += fmt.Sprintf("\x00(with credentials, pull %d)", p.credPulls.Add(1))
		ms = nil
	}
	v, err := p.flights.do(ctx, key, func(ctx context.Context) (any, error) {
		defer p.prog.startRef(norm)()
		res, err := p.Registry.ResolveShared(ctx, r, ms)
		if err != nil {
			return nil, err
		}
		p.prog.resolved(norm, res.Digest.String())
		m, err := p.image(ctx, res)
		if err != nil {
			return nil, err
		}
		dg := res.Digest.String()
		if err := p.recordRef(norm, dg); err != nil {
			return nil, err
		}
		return p.pulled(norm, dg, m)
	})
	if err != nil {
		return Pulled{}, err
	}
	return v.(Pulled), nil
}

func (p *Puller) pulled(ref, dg string, m image.Manifest) (Pulled, error) {
	img, err := image.FromManifest(m, "", p.Spec)
	if err != nil {
		return Pulled{}, errdefs.Internal(err, "image %s", ref)
	}
	img.Ref, img.Digest = ref, dg
	return Pulled{Ref: ref, Digest: dg, Image: img}, nil
}

// image returns the environment of res's digest, pulling it unless this
// node has it.
func (p *Puller) image(ctx context.Context, res registry.Resolved) (image.Manifest, error) {
	dg := res.Digest.String()
	if m, err := p.useImage(dg); err == nil {
		return m, nil
	}
	v, err := p.flights.do(ctx, "image\x00"+dg, func(ctx context.Context) (any, error) {
		if m, err := p.useImage(dg); err == nil {
			return m, nil
		}
		defer p.prog.startImage(registry.Normalized(res.Ref), dg)()
		m, err := p.pullImage(ctx, res)
		if err != nil {
			return nil, err
		}
		if _, err := p.Evict(context.WithoutCancel(ctx), dg); err != nil {
			p.log().Warn("image cache eviction", "err", err)
		}
		if p.GC != nil {
			p.GC.EvictSoon(ctx)
		}
		return m, nil
	})
	if err != nil {
		return image.Manifest{}, err
	}
	return v.(image.Manifest), nil
}

// pullWorkers is how many layers of one image are fetched at once.
const pullWorkers = 3

func (p *Puller) pullImage(ctx context.Context, res registry.Resolved) (image.Manifest, error) {
	start := time.Now()
	img := res.Image
	cf, err := p.configFile(ctx, img)
	if err != nil {
		return image.Manifest{}, registry.Classify(err, "config of "+registry.Normalized(res.Ref))
	}
	ls, err := img.Layers()
	if err != nil {
		return image.Manifest{}, registry.Classify(err, "layers of "+registry.Normalized(res.Ref))
	}
	if len(ls) == 0 {
		return image.Manifest{}, errdefs.Invalid("image %s has no layers", registry.Normalized(res.Ref))
	}
	if len(cf.RootFS.DiffIDs) != len(ls) {
		return image.Manifest{}, errdefs.Invalid("image %s: %d layers but %d diff IDs in its config", registry.Normalized(res.Ref), len(ls), len(cf.RootFS.DiffIDs))
	}
	var ocis []string
	var sizes []int64
	var compressed int64
	for _, l := range ls {
		dg, err := l.Digest()
		if err != nil {
			return image.Manifest{}, registry.Classify(err, "layer digest")
		}
		sz, err := l.Size()
		if err != nil {
			return image.Manifest{}, registry.Classify(err, "layer size")
		}
		ocis, compressed = append(ocis, dg.String()), compressed+sz
		sizes = append(sizes, sz)
	}
	p.prog.imageLayers(res.Digest.String(), ocis, sizes)
	if p.Budget > 0 && compressed > p.Budget {
		return image.Manifest{}, errdefs.New(api.CodeResourceExhausted, "image %s: its layers are %d bytes compressed, more than this node's image cache budget (%d bytes)",
			registry.Normalized(res.Ref), compressed, p.Budget)
	}
	// The layer records this pull uses stay until its image record names them.
	p.pin(ocis)
	defer p.unpin(ocis)
	p.at("pull:start")
	out := make([]image.Layer, len(ls))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(pullWorkers)
	var held heldBlobs
	defer held.release()
	if p.GC != nil && p.Claims != nil {
		// The config, kept in the shared store (configFile).
		if cm, err := img.Manifest(); err == nil {
			if err := held.hold(ctx, p.GC, []string{cm.Config.Digest.String()}); err != nil {
				return image.Manifest{}, err
			}
		}
	}
	for i, l := range ls {
		g.Go(func() error {
			el, err := p.heldLayer(gctx, &held, res.Source, l, cf.RootFS.DiffIDs[i])
			out[i] = el
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return image.Manifest{}, err
	}
	image.Roles(out, false)
	c := configOf(cf)
	if err := c.Validate(); err != nil {
		return image.Manifest{}, err
	}
	m := image.Manifest{Version: image.ManifestVersion, Name: image.Pin(registry.Normalized(res.Ref), res.Digest.String()),
		Description: "pulled from " + registry.Normalized(res.Ref), BlobStore: p.Spec, Layers: out, Config: c, Created: time.Now().UTC()}
	if registry.HasCredentials(ctx, res.Ref) {
		if err := p.markPrivate(res.Digest.String()); err != nil {
			return image.Manifest{}, err
		}
	}
	if err := p.writeImage(res.Digest.String(), m); err != nil {
		return image.Manifest{}, err
	}
	p.log().Info("pulled image", "ref", registry.Normalized(res.Ref), "digest", res.Digest.String(), "layers", len(out), "took", time.Since(start))
	return m, nil
}

// maxConfigBytes bounds an image config read back from the blob store.
const maxConfigBytes = 8 << 20

// configFile is img's config. With Claims (a blob store the cluster
// shares), one node of the cluster fetches it from the registry, as it does
// a layer, and stores it in the blob store by its digest; the others read it
// there.
func (p *Puller) configFile(ctx context.Context, img v1.Image) (*v1.ConfigFile, error) {
	if p.Claims == nil {
		return img.ConfigFile()
	}
	// (Its manifest names it; ConfigName would fetch it to hash it.)
	m, err := img.Manifest()
	if err != nil {
		return nil, err
	}
	raw, err := p.sharedBlob(ctx, "config", m.Config.Digest.String(), maxConfigBytes, func(context.Context) ([]byte, error) {
		return img.RawConfigFile()
	})
	if err != nil {
		return nil, err
	}
	return v1.ParseConfigFile(bytes.NewReader(raw))
}

func (p *Puller) log() *slog.Logger {
	if p.Log == nil {
		return slog.Default()
	}
	return p.Log
}

// configOf is the part of an OCI config dsec keeps.
func configOf(cf *v1.ConfigFile) *image.Config {
	c := &image.Config{Env: cf.Config.Env, WorkingDir: cf.Config.WorkingDir, User: cf.Config.User,
		Entrypoint: cf.Config.Entrypoint, Cmd: cf.Config.Cmd, Labels: cf.Config.Labels}
	for port := range cf.Config.ExposedPorts {
		c.ExposedPorts = append(c.ExposedPorts, port)
	}
	sort.Strings(c.ExposedPorts)
	if c.IsZero() {
		return nil
	}
	return c
}

// heldLayer is layer, with its blobs held (p.GC) until the pull ends: a
// layer whose blob an eviction took before the hold is made again.
func (p *Puller) heldLayer(ctx context.Context, held *heldBlobs, src registry.Source, l v1.Layer, diffID v1.Hash) (image.Layer, error) {
	for try := 1; ; try++ {
		el, err := p.layer(ctx, src, l, diffID)
		if err != nil || p.GC == nil {
			return el, err
		}
		release, missing, err := p.GC.Hold(ctx, blobsOf([]image.Layer{el}))
		if err != nil {
			return el, err
		}
		held.add(release)
		if len(missing) == 0 {
			return el, nil
		}
		dg, _ := l.Digest()
		if try == pullTries {
			return el, errdefs.New(api.CodeUnavailable, "layer %s left the shared blob store while it was pulled (%d tries)", dg, try)
		}
		p.gcMu.Lock()
		_ = os.Remove(p.layerPath(dg.String()))
		p.gcMu.Unlock()
	}
}

// heldBlobs collects the releases of a pull's holds.
type heldBlobs struct {
	mu       sync.Mutex
	releases []func()
}

func (h *heldBlobs) add(f func()) {
	h.mu.Lock()
	h.releases = append(h.releases, f)
	h.mu.Unlock()
}

func (h *heldBlobs) hold(ctx context.Context, g *StoreGC, ds []string) error {
	release, _, err := g.Hold(ctx, ds)
	if err == nil {
		h.add(release)
	}
	return err
}

func (h *heldBlobs) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range h.releases {
		f()
	}
	h.releases = nil
}

// layer returns l's EROFS layer, converting it unless this node has it; src
// is where its image was resolved (the blob is fetched from there).
func (p *Puller) layer(ctx context.Context, src registry.Source, l v1.Layer, diffID v1.Hash) (image.Layer, error) {
	dg, err := l.Digest()
	if err != nil {
		return image.Layer{}, registry.Classify(err, "layer digest")
	}
	if el, err := p.readLayer(ctx, dg.String()); err == nil {
		p.prog.layerPhase(dg.String(), api.PullDone)
		return el, nil
	}
	v, err := p.flights.do(ctx, "layer\x00"+dg.String(), func(ctx context.Context) (any, error) {
		if el, err := p.readLayer(ctx, dg.String()); err == nil {
			p.prog.layerPhase(dg.String(), api.PullDone)
			return el, nil
		}
		el, err := p.convertOnce(ctx, src, l, dg, diffID)
		if err == nil {
			p.prog.layerPhase(dg.String(), api.PullDone)
		}
		return el, err
	})
	if err != nil {
		return image.Layer{}, err
	}
	return v.(image.Layer), nil
}

// convertOnce is convert, unless another node sharing the blob store
// converted l (or is converting it: then it waits for that node).
func (p *Puller) convertOnce(ctx context.Context, src registry.Source, l v1.Layer, dg, diffID v1.Hash) (image.Layer, error) {
	if p.Claims == nil {
		return p.convert(ctx, src, l, dg, diffID)
	}
	have := func(el image.Layer) bool {
		_, err := p.Blobs.Stat(ctx, el.Digest)
		return err == nil
	}
	got, done, err := p.Claims.Claim(ctx, dg.String(), have)
	if err != nil {
		return image.Layer{}, err
	}
	if got != nil {
		if err := p.writeLayer(dg.String(), *got); err != nil {
			return image.Layer{}, err
		}
		p.log().Debug("layer converted by another node", "digest", dg.String(), "erofs", got.Digest)
		return *got, nil
	}
	el, err := p.convert(ctx, src, l, dg, diffID)
	made := &el
	if err != nil {
		made = nil
	}
	if rerr := done(made); rerr != nil {
		p.log().Warn("layer claim", "digest", dg.String(), "err", rerr)
	}
	return el, err
}

// convert fetches l, verifies it against its digest and the uncompressed
// tar against diffID, converts it and records it, in one pass: the body is
// hashed and decompressed as it arrives and its tar converted on the fly
// (no copy of the compressed blob on disk). The record is written only
// after both digests match; content that does not is refused even when it
// fails to decompress or convert first. The fetch runs under ctx (from src,
// where l's image was resolved): when ctx ends, the transfer stops and the
// partial layer is removed.
func (p *Puller) convert(ctx context.Context, src registry.Source, l v1.Layer, dg, diffID v1.Hash) (image.Layer, error) {
	tmp, err := p.tempDir()
	if err != nil {
		return image.Layer{}, err
	}
	// A layer of an image not resolved from a registry (no source) is read
	// as it is.
	if fl, err := src.Layer(ctx, dg); err == nil {
		l = fl
	}
	rc, err := l.Compressed()
	if err != nil {
		return image.Layer{}, registry.Classify(err, "layer "+dg.String())
	}
	defer rc.Close()
	p.LayersFetched.Add(1)
	body := &fetchBody{r: rc, h: sha256.New(), n: counter{p.prog.layerPhase(dg.String(), api.PullFetching)},
		ended: func() { p.prog.layerPhase(dg.String(), api.PullConverting) }}
	dh := sha256.New()
	res, cerr := p.build(ctx, dg, body, dh, tmp)
	if ctx.Err() != nil {
		return image.Layer{}, registry.Classify(context.Cause(ctx), "layer "+dg.String())
	}
	// The rest of the body (all of it after a failed conversion) is hashed:
	// content the registry altered is refused as such.
	if _, err := io.Copy(io.Discard, body); err != nil && body.err == nil {
		body.err = err
	}
	if body.err != nil {
		return image.Layer{}, registry.Classify(body.err, "layer "+dg.String())
	}
	if got := "sha256:" + hex.EncodeToString(body.h.Sum(nil)); got != dg.String() {
		return image.Layer{}, errdefs.Wrap(api.CodeUnavailable, blob.ErrDigestMismatch,
			"layer %s: the registry sent content whose digest is %s: refused, nothing stored", dg, got)
	}
	if cerr != nil {
		return image.Layer{}, cerr
	}
	if got := "sha256:" + hex.EncodeToString(dh.Sum(nil)); diffID.Hex != "" && got != diffID.String() {
		// The blob store keeps the EROFS blob (content-addressed, harmless) but
		// no record names it.
		return image.Layer{}, errdefs.Wrap(api.CodeUnavailable, blob.ErrDigestMismatch,
			"layer %s: uncompressed content is %s, the image config says %s: refused", dg, got, diffID)
	}
	el := res.Layer
	el.Store = ""
	if err := p.writeLayer(dg.String(), el); err != nil {
		return image.Layer{}, err
	}
	p.log().Debug("converted layer", "digest", dg.String(), "erofs", el.Digest, "size", el.Size, "took", res.BuildTime)
	return el, nil
}

// build decompresses body (gzip, zstd or a plain tar, told by its first
// bytes), hashes the uncompressed tar into dh and converts it.
func (p *Puller) build(ctx context.Context, dg v1.Hash, body io.Reader, dh hash.Hash, tmp string) (layer.Result, error) {
	ur, err := decompress(bufio.NewReaderSize(body, 1<<20))
	if err != nil {
		return layer.Result{}, errdefs.Invalid("layer %s: %v", dg, err)
	}
	defer ur.Close()
	hr := hashReader{ur, dh}
	res, err := layer.BuildOCILayer(ctx, dg.String(), hr, p.Blobs, layer.Options{TempDir: tmp})
	if err != nil {
		return res, err
	}
	// The tar reader stops at the end-of-archive blocks: hash the rest too.
	if _, err := io.Copy(io.Discard, hr); err != nil {
		return res, errdefs.Invalid("layer %s: %v", dg, err)
	}
	return res, nil
}

// decompress reads a layer blob's tar: gzip and zstd are told by their
// magic numbers, anything else is read as it is.
func decompress(br *bufio.Reader) (io.ReadCloser, error) {
	magic, _ := br.Peek(4)
	switch {
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		return gzip.NewReader(br)
	case len(magic) == 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd:
		zr, err := zstd.NewReader(br)
		if err != nil {
			return nil, err
		}
		return zr.IOReadCloser(), nil
	}
	return io.NopCloser(br), nil
}

// fetchBody is a layer's body as it arrives: hashed and counted; the
// first error other than its end is kept (the reader above sees it too).
type fetchBody struct {
	r     io.Reader
	h     hash.Hash
	n     counter
	ended func() // called once, at the body's end
	err   error
	done  bool
}

func (b *fetchBody) Read(buf []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.r.Read(buf)
	b.h.Write(buf[:n])
	b.n.Write(buf[:n])
	switch {
	case err == nil:
	case err == io.EOF || isVerifyErr(err):
		// go-containerregistry's own digest check at the end: ours (convert)
		// reports it with the digest sent.
		b.done, err = true, io.EOF
		b.ended()
	default:
		b.err = err
	}
	return n, err
}

// isVerifyErr: go-containerregistry's own digest check failed at EOF (ours
// reports it with the digest sent).
func isVerifyErr(err error) bool { return strings.Contains(err.Error(), "error verifying") }

type hashReader struct {
	r io.Reader
	h hash.Hash
}

func (hr hashReader) Read(b []byte) (int, error) {
	n, err := hr.r.Read(b)
	hr.h.Write(b[:n])
	return n, err
}

func (p *Puller) tempDir() (string, error) {
	d := p.TempDir
	if d == "" {
		d = filepath.Join(p.Dir, "tmp")
	}
	if err := os.MkdirAll(d, 0o700); err != nil {
		return "", errdefs.Internal(err, "pull temp dir")
	}
	return d, nil
}

// ---- records ------------------------------------------------------------------

func hexOf(dg string) string { return strings.TrimPrefix(dg, "sha256:") }

func (p *Puller) readLayer(ctx context.Context, dg string) (image.Layer, error) {
	el, err := p.readLayerRecord(dg)
	if err != nil {
		return el, err
	}
	// The record outlives nothing: its blob must still be in the store.
	if _, err := p.Blobs.Stat(ctx, el.Digest); err != nil {
		return el, err
	}
	return el, nil
}

func (p *Puller) readLayerRecord(dg string) (image.Layer, error) {
	var el image.Layer
	b, err := os.ReadFile(p.layerPath(dg))
	if err != nil {
		return el, err
	}
	err = json.Unmarshal(b, &el)
	return el, err
}

func (p *Puller) writeLayer(dg string, el image.Layer) error {
	b, _ := json.Marshal(el)
	return p.write(p.layerPath(dg), b)
}

func (p *Puller) readImage(dg string) (image.Manifest, error) {
	if _, err := blob.ParseDigest(dg); err != nil {
		return image.Manifest{}, err
	}
	return image.ReadManifest(p.imagePath(dg))
}

// useImage reads image dg's record and marks it used now, under the cache
// lock: an eviction either removed it before (not found: pull again) or
// sees this use.
func (p *Puller) useImage(dg string) (image.Manifest, error) {
	p.gcMu.Lock()
	defer p.gcMu.Unlock()
	m, err := p.readImage(dg)
	if err == nil {
		now := time.Now()
		_ = os.Chtimes(p.imagePath(dg), now, now)
	}
	return m, err
}

func (p *Puller) writeImage(dg string, m image.Manifest) error {
	b, err := m.Marshal()
	if err != nil {
		return errdefs.Internal(err, "image %s", dg)
	}
	return p.write(p.imagePath(dg), b)
}

func (p *Puller) write(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return errdefs.Internal(err, "pull records")
	}
	if err := image.WriteFileAtomic(path, b); err != nil {
		return errdefs.Internal(err, "pull record %s", path)
	}
	return nil
}

// Ref is a reference this node pulled.
type Ref struct {
	Ref    string    `json:"ref"`
	Digest string    `json:"digest"`
	Pulled time.Time `json:"pulled"`
}

func (p *Puller) refsPath() string { return filepath.Join(p.Dir, "refs.json") }

// Refs lists the references this node pulled, sorted.
func (p *Puller) Refs() ([]Ref, error) {
	p.refsMu.Lock()
	defer p.refsMu.Unlock()
	return p.readRefs()
}

func (p *Puller) readRefs() ([]Ref, error) {
	b, err := os.ReadFile(p.refsPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, errdefs.Internal(err, "pulled references")
	}
	var out []Ref
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, errdefs.Internal(err, "pulled references")
	}
	return out, nil
}

func (p *Puller) recordRef(ref, dg string) error {
	p.refsMu.Lock()
	defer p.refsMu.Unlock()
	refs, err := p.readRefs()
	if err != nil {
		return err
	}
	i := sort.Search(len(refs), func(i int) bool { return refs[i].Ref >= ref })
	r := Ref{Ref: ref, Digest: dg, Pulled: time.Now().UTC()}
	if i < len(refs) && refs[i].Ref == ref {
		refs[i] = r
	} else {
		refs = append(refs[:i], append([]Ref{r}, refs[i:]...)...)
	}
	if err := p.writeRefs(refs); err != nil {
		return fmt.Errorf("record %s: %w", ref, err)
	}
	return nil
}

// writeRefs replaces the references (p.refsMu held).
func (p *Puller) writeRefs(refs []Ref) error {
	b, _ := json.MarshalIndent(refs, "", " ")
	return p.write(p.refsPath(), b)
}

var _ image.RefPuller = (*Puller)(nil)

// PullRef implements images.RefPuller.
func (p *Puller) PullRef(ctx context.Context, ref string) (image.Image, error) {
	r, err := p.Pull(ctx, ref)
	return r.Image, err
}

// Has implements images.RefPuller: the node's records name an image for ref
// (a digest reference: that digest; a tag: what it last resolved to here).
func (p *Puller) Has(ref string) bool {
	r, err := registry.Parse(ref)
	if err != nil {
		return false
	}
	dg := ""
	if d, ok := r.(name.Digest); ok {
		dg = d.DigestStr()
	} else {
		norm := registry.Normalized(r)
		refs, err := p.Refs()
		if err != nil {
			return false
		}
		for _, rr := range refs {
			if rr.Ref == norm {
				dg = rr.Digest
			}
		}
	}
	if dg == "" {
		return false
	}
	_, err = os.Stat(p.imagePath(dg))
	return err == nil
}

// PulledRefs implements images.RefPuller: each pulled reference (named as
// normalised) with the image it last resolved to.
func (p *Puller) PulledRefs() ([]image.Image, error) {
	refs, err := p.Refs()
	if err != nil {
		return nil, err
	}
	out := make([]image.Image, 0, len(refs))
	for _, r := range refs {
		m, err := p.readImage(r.Digest)
		if err != nil {
			continue // its record is gone: not on this node any more
		}
		pl, err := p.pulled(r.Ref, r.Digest, m)
		if err != nil {
			continue
		}
		pl.Image.Name = r.Ref
		if fi, err := os.Stat(p.imagePath(r.Digest)); err == nil {
			pl.Image.LastUsed = fi.ModTime().UTC()
		}
		out = append(out, pl.Image)
	}
	return out, nil
}
