package build

// The build cache's budget. Each layer step's result is an environment
// "buildcache-<key>" (build.go); its layers are blobs. The cache's size is
// what only the cache holds: the distinct layer blobs the cache entries name
// that no other environment (a built image), named layer, pulled image or
// running sandbox has. A build that puts the cache over Builder.CacheBudget
// evicts the entries used least recently (a cache hit or the step's build is
// a use, kept as the mtime of a mark file under Builder.CacheDir), never
// one a build in progress on this node stands on (pinned), nor one a sandbox
// runs on. Eviction removes the entry's environment first, then the blobs
// nothing names any more: a crash between leaves blobs no entry names (a
// later eviction or prune of another entry does not see them; they cost disk
// only), never an entry whose blobs are gone (cached checks them anyway).

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/pkg/api"
)

// DefaultCacheBudget is the build cache budget of a node unless configured:
// 10 GiB of layers only the cache holds.
const DefaultCacheBudget int64 = 10 << 30

// pin keeps cache entry name from eviction until the build ends (unpinAll).
func (r *run) pin(name string) {
	b := r.b
	b.cacheMu.Lock()
	defer b.cacheMu.Unlock()
	if b.pinned == nil {
		b.pinned = map[string]int{}
	}
	b.pinned[name]++
	r.pins = append(r.pins, name)
}

func (r *run) unpinAll() {
	b := r.b
	b.cacheMu.Lock()
	defer b.cacheMu.Unlock()
	for _, n := range r.pins {
		if b.pinned[n]--; b.pinned[n] <= 0 {
			delete(b.pinned, n)
		}
	}
	r.pins = nil
}

// touch records a use of cache entry name now.
func (b *Builder) touch(name string) {
	if b.CacheDir == "" {
		return
	}
	p := filepath.Join(b.CacheDir, name)
	now := time.Now()
	if err := os.Chtimes(p, now, now); err == nil {
		return
	}
	if err := os.MkdirAll(b.CacheDir, 0o700); err != nil {
		b.log().Warn("build cache use mark", "err", err)
		return
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		b.log().Warn("build cache use mark", "err", err)
		return
	}
	f.Close()
}

// CacheEntry is one cached build step.
type CacheEntry struct {
	Name string
	// Bytes adds up the entry's layers only the build cache holds (a layer
	// several entries hold is counted in each).
	Bytes    int64
	LastUsed time.Time
	// layers are the digests (blob and chunk index) only the cache holds.
	layers []image.Layer
}

// CacheUsage is the build cache's state.
type CacheUsage struct {
	// Entries, least recently used first.
	Entries []CacheEntry
	// Bytes is the size of the distinct layer blobs only the cache holds.
	Bytes  int64
	Budget int64
}

// held returns the blob digests something other than the build cache
// holds: other environments, named layers, pulled images, sandboxes.
func (b *Builder) held(ctx context.Context, envs map[string]image.Manifest) (map[string]bool, error) {
	out := map[string]bool{}
	add := func(l image.Layer) {
		if l.Digest != "" {
			out[l.Digest] = true
		}
		if l.Index != "" {
			out[l.Index] = true
		}
	}
	for n, m := range envs {
		if !strings.HasPrefix(n, CachePrefix) {
			for _, l := range m.Layers {
				add(l)
			}
		}
	}
	named, err := b.Envs.State.Layers(ctx)
	if err != nil {
		return nil, err
	}
	for _, l := range named {
		add(l.Layer)
	}
	if b.HeldBlobs != nil {
		ds, err := b.HeldBlobs(ctx)
		if err != nil {
			return nil, err
		}
		for d := range ds {
			out[d] = true
		}
	}
	return out, nil
}

// envs reads every environment (one removed meanwhile is left out).
func (b *Builder) envs(ctx context.Context) (map[string]image.Manifest, error) {
	names, err := b.Envs.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]image.Manifest, len(names))
	for _, n := range names {
		m, err := b.Envs.Get(ctx, n)
		if errdefs.Is(err, api.CodeNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[n] = m
	}
	return out, nil
}

// usage computes the cache's entries and size.
func (b *Builder) usage(ctx context.Context) (CacheUsage, error) {
	u := CacheUsage{Budget: b.CacheBudget}
	envs, err := b.envs(ctx)
	if err != nil {
		return u, err
	}
	held, err := b.held(ctx, envs)
	if err != nil {
		return u, err
	}
	seen := map[string]bool{}
	for n, m := range envs {
		if !strings.HasPrefix(n, CachePrefix) {
			continue
		}
		e := CacheEntry{Name: n, LastUsed: m.Created}
		if b.CacheDir != "" {
			if fi, err := os.Stat(filepath.Join(b.CacheDir, n)); err == nil {
				e.LastUsed = fi.ModTime()
			}
		}
		for _, l := range m.Layers {
			if l.Digest == "" || held[l.Digest] {
				continue
			}
			e.layers = append(e.layers, l)
			e.Bytes += l.Size
			if !seen[l.Digest] {
				seen[l.Digest] = true
				u.Bytes += l.Size
			}
		}
		u.Entries = append(u.Entries, e)
	}
	slices.SortFunc(u.Entries, func(a, c CacheEntry) int {
		if d := a.LastUsed.Compare(c.LastUsed); d != 0 {
			return d
		}
		return strings.Compare(a.Name, c.Name)
	})
	return u, nil
}

// CacheUsage reports the build cache's entries and size.
func (b *Builder) CacheUsage(ctx context.Context) (CacheUsage, error) {
	b.cacheMu.Lock()
	defer b.cacheMu.Unlock()
	return b.usage(ctx)
}

// CachePruned is what Evict or Prune removed.
type CachePruned struct {
	Entries []string
	// Bytes of the layer blobs deleted.
	Bytes int64
	// Kept counts the entries left because a build or a sandbox uses them.
	Kept int
}

// Evict removes the least recently used cache entries until the cache is
// within b.CacheBudget (0 or less: no budget).
func (b *Builder) Evict(ctx context.Context) (CachePruned, error) {
	if b.CacheBudget <= 0 {
		return CachePruned{}, nil
	}
	return b.shrink(ctx, b.CacheBudget)
}

// Prune removes every cache entry no build in progress and no sandbox uses
// and that holds a layer of its own (an entry whose layers an image also has
// frees nothing and stays, so a rebuild of that image still hits it).
func (b *Builder) Prune(ctx context.Context) (CachePruned, error) {
	return b.shrink(ctx, -1)
}

// shrink evicts entries, least recently used first, until the cache holds
// at most limit bytes (-1: remove all it may).
func (b *Builder) shrink(ctx context.Context, limit int64) (CachePruned, error) {
	var out CachePruned
	b.cacheMu.Lock()
	defer b.cacheMu.Unlock()
	u, err := b.usage(ctx)
	if err != nil || limit >= 0 && u.Bytes <= limit {
		return out, err
	}
	inUse := map[string]bool{}
	if b.LayersInUse != nil {
		inUse = b.LayersInUse()
	}
	// refs counts the remaining entries that name each cache-only blob.
	refs := map[string]int{}
	for _, e := range u.Entries {
		for _, l := range e.layers {
			refs[l.Digest]++
		}
	}
	total := u.Bytes
	for _, e := range u.Entries {
		if limit >= 0 && total <= limit {
			break
		}
		if len(e.layers) == 0 { // costs nothing: its layers are an image's
			continue
		}
		if b.pinned[e.Name] > 0 || slices.ContainsFunc(e.layers, func(l image.Layer) bool { return inUse[l.Digest] }) {
			out.Kept++
			continue
		}
		if err := b.Envs.Remove(ctx, e.Name); err != nil {
			if errdefs.Is(err, api.CodeConflict) {
				out.Kept++
				continue
			}
			if !errdefs.Is(err, api.CodeNotFound) {
				return out, err
			}
		}
		out.Entries = append(out.Entries, e.Name)
		if b.CacheDir != "" {
			_ = os.Remove(filepath.Join(b.CacheDir, e.Name))
		}
		var errs []error
		for _, l := range e.layers {
			if refs[l.Digest]--; refs[l.Digest] > 0 {
				continue
			}
			if b.SharedBlobs { // the entry goes, its blobs stay
				continue
			}
			for _, d := range []string{l.Digest, l.Index} {
				if d == "" || b.Envs.Blobs == nil {
					continue
				}
				if err := b.Envs.Blobs.Delete(ctx, d); err != nil && !errdefs.Is(err, api.CodeNotFound) {
					errs = append(errs, err)
				}
			}
			total -= l.Size
			out.Bytes += l.Size
		}
		if err := errors.Join(errs...); err != nil {
			return out, err
		}
	}
	if limit >= 0 && total > limit {
		b.log().Warn("build cache over its budget: the rest is in use", "bytes", total, "budget", limit)
	}
	if len(out.Entries) > 0 {
		b.log().Info("build cache evicted", "entries", len(out.Entries), "freed", out.Bytes, "bytes", total)
	}
	return out, nil
}
