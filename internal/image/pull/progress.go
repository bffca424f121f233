package pull

import (
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/dsec-dev/dsec/internal/image/registry"
	"github.com/dsec-dev/dsec/pkg/api"
)

// progress follows the pulls in flight on the node. Its entries live as
// long as the shared fetch they describe (Puller.shared), so every caller
// joining a fetch sees the same counters.
type progress struct {
	mu     sync.Mutex
	refs   map[string]*refPull   // normalised reference → its resolution
	images map[string]*imagePull // image digest → its pull
	layers map[string]*layerPull // OCI layer digest → its fetch
}

type refPull struct {
	digest string // "" while resolving
	n      int
}

type imagePull struct {
	ref    string
	layers []*layerPull // nil until the manifest is read
	n      int
}

type layerPull struct {
	digest  string
	total   int64
	fetched atomic.Int64
	phase   string // under progress.mu
	n       int
}

func (pr *progress) init() {
	if pr.refs == nil {
		pr.refs, pr.images, pr.layers = map[string]*refPull{}, map[string]*imagePull{}, map[string]*layerPull{}
	}
}

// startRef notes that ref is being resolved; the returned func ends it.
func (pr *progress) startRef(ref string) func() {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.init()
	r := pr.refs[ref]
	if r == nil {
		r = &refPull{}
		pr.refs[ref] = r
	}
	r.n++
	return func() {
		pr.mu.Lock()
		defer pr.mu.Unlock()
		if r.n--; r.n == 0 {
			delete(pr.refs, ref)
		}
	}
}

func (pr *progress) resolved(ref, dg string) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if r := pr.refs[ref]; r != nil {
		r.digest = dg
	}
}

// startImage notes that image dg (of ref) is being pulled; the returned
// func ends it and the layer entries only it used.
func (pr *progress) startImage(ref, dg string) func() {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.init()
	im := pr.images[dg]
	if im == nil {
		im = &imagePull{ref: ref}
		pr.images[dg] = im
	}
	im.n++
	return func() {
		pr.mu.Lock()
		defer pr.mu.Unlock()
		if im.n--; im.n > 0 {
			return
		}
		delete(pr.images, dg)
		for _, l := range im.layers {
			if l.n--; l.n == 0 {
				delete(pr.layers, l.digest)
			}
		}
	}
}

// imageLayers sets image dg's layers (digests and compressed sizes); a layer
// another image's pull is fetching is the same entry.
func (pr *progress) imageLayers(dg string, digests []string, sizes []int64) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	im := pr.images[dg]
	if im == nil || im.layers != nil {
		return
	}
	im.layers = make([]*layerPull, len(digests))
	for i, ld := range digests {
		l := pr.layers[ld]
		if l == nil {
			l = &layerPull{digest: ld, total: sizes[i], phase: api.PullWaiting}
			pr.layers[ld] = l
		}
		l.n++
		im.layers[i] = l
	}
}

// layerPhase sets layer dg's phase (no-op for a layer no pull follows).
func (pr *progress) layerPhase(dg, phase string) *layerPull {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	l := pr.layers[dg]
	if l == nil {
		return nil
	}
	l.phase = phase
	if phase == api.PullDone {
		l.fetched.Store(l.total)
	}
	if phase == api.PullFetching {
		l.fetched.Store(0)
	}
	return l
}

// counter counts bytes fetched into l (l may be nil).
type counter struct{ l *layerPull }

func (c counter) Write(b []byte) (int, error) {
	if c.l != nil {
		c.l.fetched.Add(int64(len(b)))
	}
	return len(b), nil
}

var phaseOrder = map[string]int{api.PullResolving: 0, api.PullWaiting: 1, api.PullFetching: 2, api.PullConverting: 3, api.PullDone: 4}

func (pr *progress) snapshot(ref, dg string, im *imagePull) api.PullProgress {
	out := api.PullProgress{Ref: ref, Digest: dg, Phase: api.PullResolving}
	if im == nil || im.layers == nil {
		if dg != "" {
			out.Phase = api.PullFetching // the manifest and config
		}
		return out
	}
	out.Phase = api.PullDone
	for _, l := range im.layers {
		lp := api.LayerProgress{Digest: l.digest, Phase: l.phase, FetchedBytes: l.fetched.Load(), TotalBytes: l.total}
		out.Layers = append(out.Layers, lp)
		out.FetchedBytes += lp.FetchedBytes
		out.TotalBytes += lp.TotalBytes
		if phaseOrder[lp.Phase] < phaseOrder[out.Phase] {
			out.Phase = lp.Phase
		}
	}
	if out.Phase == api.PullWaiting {
		out.Phase = api.PullFetching
	}
	return out
}

// Progress returns how far the pull in flight of ref (a reference as Pull
// takes it, or an image digest) got on this node; false when none is in
// flight (not started, or ended: Pull's answer then says how).
func (p *Puller) Progress(ref string) (api.PullProgress, bool) {
	pr := &p.prog
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if strings.HasPrefix(ref, "sha256:") {
		if im := pr.images[ref]; im != nil {
			return pr.snapshot(im.ref, ref, im), true
		}
		return api.PullProgress{}, false
	}
	r, err := registry.Parse(ref)
	if err != nil {
		return api.PullProgress{}, false
	}
	norm := registry.Normalized(r)
	if rp := pr.refs[norm]; rp != nil {
		return pr.snapshot(norm, rp.digest, pr.images[rp.digest]), true
	}
	if d, ok := r.(name.Digest); ok {
		if im := pr.images[d.DigestStr()]; im != nil {
			return pr.snapshot(norm, d.DigestStr(), im), true
		}
	}
	return api.PullProgress{}, false
}

// Pulls returns every pull in flight on this node, by reference.
func (p *Puller) Pulls() []api.PullProgress {
	pr := &p.prog
	pr.mu.Lock()
	defer pr.mu.Unlock()
	out := make([]api.PullProgress, 0, len(pr.refs))
	for ref, rp := range pr.refs {
		out = append(out, pr.snapshot(ref, rp.digest, pr.images[rp.digest]))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ref < out[j].Ref })
	return out
}
