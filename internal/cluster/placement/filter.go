package placement

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// matches reports whether the node could ever run req: backend, hardware, labels.
func matches(n *Node, req *Request) bool {
	if !slices.Contains(n.Backends, req.Backend) {
		return false
	}
	for _, h := range req.Hardware {
		if !slices.Contains(n.Hardware, h) {
			return false
		}
	}
	for _, c := range req.Constraints {
		if v, ok := n.Labels[c.Key]; !ok || v != c.Value {
			return false
		}
	}
	return true
}

// fits reports whether amount more fits into capacity on top of load.
func fits(capacity, load, amount Resources) bool {
	return within(capacity.Sandboxes, load.Sandboxes+amount.Sandboxes) &&
		within(capacity.MilliCPU, load.MilliCPU+amount.MilliCPU) &&
		within(capacity.MemoryBytes, load.MemoryBytes+amount.MemoryBytes)
}

func within(capacity, used int64) bool { return capacity == 0 || used <= capacity }

func feasible(n *nodeView, req *Request, res Resources, rejected []string) bool {
	return n.State == StateReady && matches(&n.Node, req) && fits(n.Capacity, n.load(), res) &&
		(len(rejected) == 0 || !slices.Contains(rejected, n.Name))
}

// feasibleLocked returns the indices of the feasible nodes (in e.buf), skipping
// the nodes that rejected anything since the snapshot if avoidRejecting.
func (e *Engine) feasibleLocked(req *Request, res Resources, rejected []string, avoidRejecting bool) []int {
	out := e.buf[:0]
	for i := range e.nodes {
		n := &e.nodes[i]
		if avoidRejecting && n.rejected {
			continue
		}
		if feasible(n, req, res, rejected) {
			out = append(out, i)
		}
	}
	e.buf = out
	return out
}

// Score is a node's load as placement ranks it: the largest of its utilisation
// fractions (sandboxes, CPU, memory committed over capacity; a zero capacity does not
// count). Lower is less loaded. Taking the maximum ranks by the resource that runs
// out first, so a node full of large sandboxes is not mistaken for an empty one.
func Score(capacity, load Resources) float64 {
	s := 0.0
	for _, p := range [3][2]int64{
		{load.Sandboxes, capacity.Sandboxes},
		{load.MilliCPU, capacity.MilliCPU},
		{load.MemoryBytes, capacity.MemoryBytes},
	} {
		if p[1] > 0 {
			s = max(s, float64(p[0])/float64(p[1]))
		}
	}
	return s
}

// locality counts how many of the request's layers the node has mounted.
func locality(n *nodeView, layers []string) int {
	if n.layers == nil {
		return 0
	}
	c := 0
	for _, l := range layers {
		if _, ok := n.layers[l]; ok {
			c++
		}
	}
	return c
}

// choose samples K of the feasible node indices and returns the best (see the
// package doc for the order).
func (e *Engine) choose(feasible []int, req *Request) int {
	k := min(e.cfg.K, len(feasible))
	// Partial Fisher-Yates: feasible[:k] becomes a uniform sample without repetition.
	for i := 0; i < k; i++ {
		j := i + e.rng.IntN(len(feasible)-i)
		feasible[i], feasible[j] = feasible[j], feasible[i]
	}
	sample := feasible[:k]
	scores := make([]float64, 0, 8)
	best := 0.0
	for i, idx := range sample {
		n := &e.nodes[idx]
		s := Score(n.Capacity, n.load())
		scores = append(scores, s)
		if i == 0 || s < best {
			best = s
		}
	}
	tol := max(e.cfg.TieTolerance, 0) + 1e-12
	pick, pickLoc, pickScore := -1, -1, 0.0
	for i, idx := range sample {
		if scores[i] > best+tol {
			continue
		}
		loc := 0
		if len(req.Layers) > 0 {
			loc = locality(&e.nodes[idx], req.Layers)
		}
		if pick < 0 || loc > pickLoc || loc == pickLoc && scores[i] < pickScore {
			pick, pickLoc, pickScore = idx, loc, scores[i]
		}
	}
	return pick
}

// pinnedLocked checks the pinned node and returns its index.
func (e *Engine) pinnedLocked(req Request, res Resources, rejected []string) (int, error) {
	i, ok := e.byName[req.Node]
	if !ok {
		return 0, errdefs.Invalid("placement: node %q is not in the cluster (%d nodes known)", req.Node, len(e.nodes))
	}
	n := &e.nodes[i]
	switch {
	case n.State != StateReady:
		return 0, errdefs.New(api.CodeUnavailable, "placement: node %q is %s and takes no new sandboxes", n.Name, n.State)
	case !matches(&n.Node, &req):
		return 0, errdefs.Invalid("placement: node %q cannot run this sandbox: %s", n.Name, mismatch(&n.Node, &req))
	case !fits(n.Capacity, Resources{}, res):
		return 0, errdefs.Invalid("placement: the sandbox (%s) is larger than node %q (%s)", fmtRes(res), n.Name, fmtRes(n.Capacity))
	case slices.Contains(rejected, n.Name) || !fits(n.Capacity, n.load(), res):
		e.exhaustedN.Add(1)
		return 0, exhausted(e.cfg.RetryAfter, "placement: node %q is full (%s of %s committed or in flight)", n.Name, fmtRes(n.load()), fmtRes(n.Capacity))
	}
	return i, nil
}

// noFitLocked explains why no node is feasible, classified by the most hopeful
// reason: exhausted (some matching node would have room later), unavailable (the
// matching nodes are not ready), invalid_argument (no node could ever run it).
func (e *Engine) noFitLocked(req Request, res Resources, rejected []string) error {
	if len(e.nodes) == 0 {
		return errdefs.New(api.CodeUnavailable, "placement: the cluster snapshot has no nodes")
	}
	var match, ready, big int
	for i := range e.nodes {
		n := &e.nodes[i]
		if !matches(&n.Node, &req) {
			continue
		}
		match++
		if !fits(n.Capacity, Resources{}, res) {
			continue
		}
		big++
		if n.State == StateReady {
			ready++
		}
	}
	switch {
	case match == 0:
		return errdefs.Invalid("placement: no node in the cluster (%d nodes) offers %s", len(e.nodes), describe(&req))
	case big == 0:
		return errdefs.Invalid("placement: the sandbox (%s) is larger than every node offering %s", fmtRes(res), describe(&req))
	case ready == 0:
		return errdefs.New(api.CodeUnavailable, "placement: the %d node(s) offering %s are all draining or lost", big, describe(&req))
	}
	e.exhaustedN.Add(1)
	msg := fmt.Sprintf("placement: all %d ready node(s) offering %s are full", ready, describe(&req))
	if len(rejected) > 0 {
		msg += fmt.Sprintf(" or rejected it (%s)", strings.Join(rejected, ", "))
	}
	return exhausted(e.cfg.RetryAfter, "%s", msg)
}

func describe(req *Request) string {
	s := "backend " + req.Backend
	if len(req.Hardware) > 0 {
		s += " with hardware " + strings.Join(req.Hardware, "+")
	}
	if len(req.Constraints) > 0 {
		s += " and labels " + FormatConstraints(req.Constraints)
	}
	return s
}

func mismatch(n *Node, req *Request) string {
	var why []string
	if !slices.Contains(n.Backends, req.Backend) {
		why = append(why, fmt.Sprintf("no backend %s (has %s)", req.Backend, strings.Join(n.Backends, ", ")))
	}
	for _, h := range req.Hardware {
		if !slices.Contains(n.Hardware, h) {
			why = append(why, "no hardware "+h)
		}
	}
	for _, c := range req.Constraints {
		if v, ok := n.Labels[c.Key]; !ok {
			why = append(why, "no label "+c.Key)
		} else if v != c.Value {
			why = append(why, fmt.Sprintf("label %s=%s, not %s", c.Key, v, c.Value))
		}
	}
	return strings.Join(why, "; ")
}

func fmtRes(r Resources) string {
	return fmt.Sprintf("%d sandboxes, %d mCPU, %d MiB", r.Sandboxes, r.MilliCPU, r.MemoryBytes>>20)
}
