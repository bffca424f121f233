package pull

// The node's cache of pulled images: what it holds (Cached), removal
// (Remove), a byte budget with least-recently-used eviction (Evict, run after
// a pull) and the clean-up of what a killed process left (Clean).
//
// Last use is the modification time of the image's record (images/HEX.json),
// touched by every pull or create that resolves the image. A layer record and
// its blobs (the EROFS blob and its chunk index) belong to the cache while an
// image record names its EROFS blob or a pull in progress has pinned it;
// removal deletes the image record first, then every layer no image names,
// blobs before records, so a crash at any point leaves at worst records and
// blobs no image names, which the next Clean removes.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/registry"
	"github.com/dsec-dev/dsec/pkg/api"
)

// InUseFunc returns, for each image digest a sandbox of the node uses, the
// IDs of those sandboxes.
type InUseFunc func(ctx context.Context) (map[string][]string, error)

// CachedImage is one image in the node's cache.
type CachedImage struct {
	Digest string
	// Refs are the references that resolved to Digest, sorted.
	Refs []string
	// Size adds up the image's layer blobs (shared layers counted in each
	// image that has them).
	Size     int64
	LastUsed time.Time
	Manifest image.Manifest
}

// cachedLayer is one layer record.
type cachedLayer struct {
	oci   string // the OCI layer digest (the record's name)
	layer image.Layer
}

// Cached lists the images in the cache, least recently used first.
func (p *Puller) Cached() ([]CachedImage, error) {
	ents, err := os.ReadDir(filepath.Join(p.Dir, "images"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, errdefs.Internal(err, "image cache")
	}
	refs, err := p.Refs()
	if err != nil {
		return nil, err
	}
	byDigest := map[string][]string{}
	for _, r := range refs {
		byDigest[r.Digest] = append(byDigest[r.Digest], r.Ref)
	}
	var out []CachedImage
	for _, e := range ents {
		hexPart, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		dg := "sha256:" + hexPart
		fi, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		m, err := p.readImage(dg)
		if err != nil {
			continue
		}
		c := CachedImage{Digest: dg, Refs: byDigest[dg], LastUsed: fi.ModTime().UTC(), Manifest: m}
		for _, l := range m.Layers {
			c.Size += l.Size
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].LastUsed.Equal(out[j].LastUsed) {
			return out[i].LastUsed.Before(out[j].LastUsed)
		}
		return out[i].Digest < out[j].Digest
	})
	return out, nil
}

// CacheBytes is what the cache holds: the sizes of the distinct layer blobs
// its layer records name.
func (p *Puller) CacheBytes() (int64, error) {
	ls, err := p.layerRecords()
	if err != nil {
		return 0, err
	}
	seen := map[string]bool{}
	var n int64
	for _, l := range ls {
		if !seen[l.layer.Digest] {
			seen[l.layer.Digest] = true
			n += l.layer.Size
		}
	}
	return n, nil
}

// pin keeps the layer records named by ocis from collection while a pull
// uses them; unpin releases them.
func (p *Puller) pin(ocis []string) {
	p.gcMu.Lock()
	defer p.gcMu.Unlock()
	if p.pinned == nil {
		p.pinned = map[string]int{}
	}
	for _, d := range ocis {
		p.pinned[d]++
	}
}

func (p *Puller) unpin(ocis []string) {
	p.gcMu.Lock()
	defer p.gcMu.Unlock()
	for _, d := range ocis {
		if p.pinned[d]--; p.pinned[d] <= 0 {
			delete(p.pinned, d)
		}
	}
}

// Removed is what Remove or Evict took out of the cache.
type Removed struct {
	Digest string
	Refs   []string
	// Bytes is the size of the layer blobs deleted with it (layers another
	// image still has are kept and not counted).
	Bytes int64
}

// Remove removes an image from the cache: name is a reference (by tag: the
// digest it last resolved to on this node) or an image digest. Every
// reference to that digest goes with it, and every layer no other image has.
// An image a sandbox uses is refused (conflict, naming the sandboxes).
func (p *Puller) Remove(ctx context.Context, name string) (Removed, error) {
	dg, err := p.digestOf(name)
	if err != nil {
		return Removed{}, err
	}
	// InUse is asked before the cache lock is taken: the sandboxes' locks
	// are never awaited under it.
	if p.InUse != nil {
		users, err := p.InUse(ctx)
		if err != nil {
			return Removed{}, fmt.Errorf("image %s: which sandboxes use it: %w", name, err)
		}
		if ids := users[dg]; len(ids) > 0 {
			sort.Strings(ids)
			return Removed{}, errdefs.New(api.CodeConflict, "image %s (%s) is used by %d sandbox(es): %s; delete them first",
				name, dg, len(ids), strings.Join(ids, ", "))
		}
	}
	p.gcMu.Lock()
	defer p.gcMu.Unlock()
	if _, err := os.Stat(p.imagePath(dg)); err != nil {
		return Removed{}, errdefs.NotFound("image %s is not in this node's image cache", name)
	}
	return p.removeLocked(ctx, dg)
}

// digestOf resolves name (a digest, a reference pinned to one, or a
// reference this node pulled) to an image digest, asking no registry.
func (p *Puller) digestOf(n string) (string, error) {
	if strings.HasPrefix(n, "sha256:") {
		if _, err := blob.ParseDigest(n); err != nil {
			return "", err
		}
		return n, nil
	}
	r, err := registry.Parse(n)
	if err != nil {
		return "", err
	}
	if d, ok := r.(name.Digest); ok {
		return d.DigestStr(), nil
	}
	norm := registry.Normalized(r)
	refs, err := p.Refs()
	if err != nil {
		return "", err
	}
	for _, x := range refs {
		if x.Ref == norm {
			return x.Digest, nil
		}
	}
	return "", errdefs.NotFound("image %s is not in this node's image cache", norm)
}

// removeLocked removes image dg (p.gcMu held): references, then the image
// record, then the layers no image names any more.
func (p *Puller) removeLocked(ctx context.Context, dg string) (Removed, error) {
	out := Removed{Digest: dg}
	p.refsMu.Lock()
	refs, err := p.readRefs()
	if err == nil {
		kept := refs[:0:0]
		for _, r := range refs {
			if r.Digest == dg {
				out.Refs = append(out.Refs, r.Ref)
			} else {
				kept = append(kept, r)
			}
		}
		if len(out.Refs) > 0 {
			err = p.writeRefs(kept)
		}
	}
	p.refsMu.Unlock()
	if err != nil {
		return out, err
	}
	p.at("remove:refs")
	if err := os.Remove(p.imagePath(dg)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return out, errdefs.Internal(err, "image %s", dg)
	}
	_ = os.Remove(p.privatePath(dg))
	p.at("remove:image")
	n, err := p.collectLocked(ctx)
	out.Bytes = n
	p.log().Info("removed image from the cache", "digest", dg, "refs", out.Refs, "freed", n)
	return out, err
}

// collectLocked deletes every layer record (and its blobs, unless
// p.SharedBlobs) that no image record names and no pull has pinned (p.gcMu
// held), and returns the bytes of the EROFS blobs deleted.
func (p *Puller) collectLocked(ctx context.Context) (int64, error) {
	named := map[string]bool{}
	imgs, err := p.imageDigests()
	if err != nil {
		return 0, err
	}
	for _, dg := range imgs {
		m, err := p.readImage(dg)
		if err != nil {
			continue
		}
		for _, l := range m.Layers {
			named[l.Digest] = true
		}
	}
	ls, err := p.layerRecords()
	if err != nil {
		return 0, err
	}
	// Blobs a kept record names stay (two OCI layers may convert to one blob).
	keep := map[string]bool{}
	var drop []cachedLayer
	for _, l := range ls {
		if named[l.layer.Digest] || p.pinned[l.oci] > 0 {
			keep[l.layer.Digest], keep[l.layer.Index] = true, true
		} else {
			drop = append(drop, l)
		}
	}
	var freed int64
	var errs []error
	for _, l := range drop {
		for _, d := range []string{l.layer.Digest, l.layer.Index} {
			if d == "" || keep[d] || p.SharedBlobs {
				continue
			}
			keep[d] = true // once
			if err := p.Blobs.Delete(ctx, d); err != nil && errdefs.CodeOf(err) != api.CodeNotFound {
				errs = append(errs, err)
				continue
			}
			if d == l.layer.Digest {
				freed += l.layer.Size
			}
		}
		p.at("remove:blobs")
		if err := os.Remove(p.layerPath(l.oci)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, errdefs.Internal(err, "layer record %s", l.oci))
		}
	}
	return freed, errors.Join(errs...)
}

// Evict removes the least recently used images no sandbox uses until the
// cache is within p.Budget (0: no budget). It never removes keep (the image
// a pull just made) nor an image used within p.Grace (a create that
// resolved it may not have registered its sandbox yet).
func (p *Puller) Evict(ctx context.Context, keep string) ([]Removed, error) {
	if p.Budget <= 0 {
		return nil, nil
	}
	if total, err := p.CacheBytes(); err != nil || total <= p.Budget {
		return nil, err
	}
	var users map[string][]string
	if p.InUse != nil {
		var err error
		if users, err = p.InUse(ctx); err != nil {
			return nil, fmt.Errorf("image cache eviction: which sandboxes use which image: %w", err)
		}
	}
	p.gcMu.Lock()
	defer p.gcMu.Unlock()
	total, err := p.CacheBytes()
	if err != nil {
		return nil, err
	}
	imgs, err := p.Cached()
	if err != nil {
		return nil, err
	}
	var out []Removed
	for _, c := range imgs {
		if total <= p.Budget {
			break
		}
		if c.Digest == keep || len(users[c.Digest]) > 0 || time.Since(c.LastUsed) < p.Grace {
			continue
		}
		r, err := p.removeLocked(ctx, c.Digest)
		if err != nil {
			return out, err
		}
		out = append(out, r)
		if total, err = p.CacheBytes(); err != nil {
			return out, err
		}
	}
	if total > p.Budget {
		p.log().Warn("image cache over its budget: the rest is in use or used recently", "bytes", total, "budget", p.Budget)
	}
	return out, nil
}

// Clean makes the cache consistent after a process was killed in the middle
// of a pull or a removal. Call it before the first Pull, when no other
// process pulls into Dir. It removes the temporary directory and temporary
// record files, this host's blob store temporary files of processes that
// are gone, layer records whose blobs are missing, image records naming a
// missing layer blob, references to missing images, and the layers no image
// names (a pull or removal cut short).
func (p *Puller) Clean(ctx context.Context) error {
	d := p.TempDir
	if d == "" {
		d = filepath.Join(p.Dir, "tmp")
	}
	if err := os.RemoveAll(d); err != nil {
		return errdefs.Internal(err, "pull temp dir")
	}
	for _, sub := range []string{"", "images", "layers"} {
		tmps, _ := filepath.Glob(filepath.Join(p.Dir, sub, ".tmp-*"))
		for _, t := range tmps {
			if err := os.Remove(t); err != nil {
				return errdefs.Internal(err, "pull records")
			}
		}
	}
	if p.Blobs == nil {
		return nil
	}
	if c, ok := p.Blobs.(interface{ RemoveStaleTemp() (int, error) }); ok {
		if _, err := c.RemoveStaleTemp(); err != nil {
			return err
		}
	}
	p.gcMu.Lock()
	defer p.gcMu.Unlock()
	has := func(d string) bool {
		if d == "" {
			return true
		}
		_, err := p.Blobs.Stat(ctx, d)
		return err == nil
	}
	ls, err := p.layerRecords()
	if err != nil {
		return err
	}
	for _, l := range ls {
		if !has(l.layer.Digest) || !has(l.layer.Index) {
			if err := os.Remove(p.layerPath(l.oci)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return errdefs.Internal(err, "layer record %s", l.oci)
			}
		}
	}
	imgs, err := p.imageDigests()
	if err != nil {
		return err
	}
	gone := map[string]bool{}
	for _, dg := range imgs {
		m, err := p.readImage(dg)
		ok := err == nil
		for _, l := range m.Layers {
			ok = ok && has(l.Digest) && has(l.Index)
		}
		if !ok {
			gone[dg] = true
			if err := os.Remove(p.imagePath(dg)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return errdefs.Internal(err, "image record %s", dg)
			}
		}
	}
	p.refsMu.Lock()
	refs, err := p.readRefs()
	if err == nil {
		kept := refs[:0:0]
		for _, r := range refs {
			if _, serr := os.Stat(p.imagePath(r.Digest)); serr == nil {
				kept = append(kept, r)
			}
		}
		if len(kept) != len(refs) {
			err = p.writeRefs(kept)
		}
	}
	p.refsMu.Unlock()
	if err != nil {
		return err
	}
	n, err := p.collectLocked(ctx)
	if n > 0 || len(gone) > 0 {
		p.log().Info("image cache cleaned after an interrupted pull or removal", "images", len(gone), "freed", n)
	}
	return err
}

// imageDigests lists the image records' digests.
func (p *Puller) imageDigests() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(p.Dir, "images"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, errdefs.Internal(err, "image records")
	}
	var out []string
	for _, e := range ents {
		if h, ok := strings.CutSuffix(e.Name(), ".json"); ok && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, "sha256:"+h)
		}
	}
	return out, nil
}

// layerRecords reads every layer record (an unreadable one is skipped).
func (p *Puller) layerRecords() ([]cachedLayer, error) {
	ents, err := os.ReadDir(filepath.Join(p.Dir, "layers"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, errdefs.Internal(err, "layer records")
	}
	var out []cachedLayer
	for _, e := range ents {
		h, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		l, err := p.readLayerRecord("sha256:" + h)
		if err != nil {
			continue
		}
		out = append(out, cachedLayer{oci: "sha256:" + h, layer: l})
	}
	return out, nil
}

func (p *Puller) imagePath(dg string) string {
	return filepath.Join(p.Dir, "images", hexOf(dg)+".json")
}

// privatePath marks image dg as fetched with a request's own registry
// credentials (registry.WithCredentials): a create by its digest asks the
// registry whether that create's credentials may read it before the node's
// copy answers (a tag is resolved at the registry at every create anyway).
func (p *Puller) privatePath(dg string) string {
	return filepath.Join(p.Dir, "private", hexOf(dg))
}

func (p *Puller) markPrivate(dg string) error {
	return p.write(p.privatePath(dg), nil)
}

func (p *Puller) isPrivate(dg string) bool {
	_, err := os.Stat(p.privatePath(dg))
	return err == nil
}

func (p *Puller) layerPath(dg string) string {
	return filepath.Join(p.Dir, "layers", hexOf(dg)+".json")
}

// at runs the test hook at a named point of a pull or removal.
func (p *Puller) at(point string) {
	if p.hook != nil {
		p.hook(point)
	}
}

// WithIndexes returns layers (EROFS blob digests, e.g. those the node's
// sandboxes run on) with the chunk indexes the node's layer records give
// them.
func (p *Puller) WithIndexes(layers map[string]bool) map[string]bool {
	out := make(map[string]bool, len(layers))
	for d := range layers {
		out[d] = true
	}
	ls, err := p.layerRecords()
	if err != nil {
		return out
	}
	for _, l := range ls {
		if layers[l.layer.Digest] && l.layer.Index != "" {
			out[l.layer.Index] = true
		}
	}
	return out
}
