package trajectory

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// The record logic every Store shares: the on-disk stores keep Meta and Step as
// JSON (Step without its bodies, which are stored apart), and all of them apply
// the same state changes.

// decodeMeta decodes a stored Meta.
func decodeMeta(v []byte) (*Meta, error) {
	if v == nil {
		return nil, errors.New("trajectory record without meta")
	}
	var m Meta
	if err := json.Unmarshal(v, &m); err != nil {
		return nil, fmt.Errorf("decoding trajectory meta: %w", err)
	}
	return &m, nil
}

// decodeStep decodes step n's stored record (without bodies).
func decodeStep(v []byte, n int) (*Step, error) {
	var s Step
	if err := json.Unmarshal(v, &s); err != nil {
		return nil, fmt.Errorf("decoding step %d: %w", n, err)
	}
	return &s, nil
}

// startMeta is the meta after step req.N was recorded as started: meta (nil for
// a new trajectory, then created is true) updated.
func startMeta(meta *Meta, req BeginRequest) (m *Meta, created bool) {
	if meta == nil {
		meta, created = newMeta(req), true
	}
	if meta.SandboxID == "" && req.SandboxID != "" {
		meta.SandboxID, meta.Create = req.SandboxID, req.Create
		meta.Sandboxes = []string{req.SandboxID}
	}
	meta.Last = max(meta.Last, req.N)
	meta.Count++
	meta.UpdatedAt = req.Now
	return meta, created
}

// finishable says whether Finish may record s's result: s was started by this
// store instance.
func finishable(s *Step, boot string) bool {
	return s != nil && s.State == api.StepStarted && s.Boot == boot
}

// finishStep records res in s and returns the answer body to store apart (nil:
// none, also when the answer was too large to keep). s.Result.Body stays nil.
func finishStep(s *Step, res Result, now time.Time) []byte {
	t := now
	s.State, s.FinishedAt = api.StepFinished, &t
	r := res
	r.Body = nil
	s.Result = &r
	if res.Truncated || len(res.Body) == 0 {
		return nil
	}
	return res.Body
}

// abortable says whether Abort may resolve s.
func abortable(s *Step) bool { return s != nil && s.State == api.StepStarted }

// rollbackMeta is the meta after step n was rolled back: gone says the
// trajectory has no steps left (delete it); lastBefore finds the highest step
// still logged below n, called only when n was the last.
func rollbackMeta(meta *Meta, n int, lastBefore func() (int, error)) (gone bool, err error) {
	meta.Count--
	if meta.Count == 0 {
		return true, nil
	}
	if meta.Last == n {
		meta.Last, err = lastBefore()
	}
	return false, err
}

func rebind(meta *Meta, sandboxID string, now time.Time) {
	meta.SandboxID = sandboxID
	if !slices.Contains(meta.Sandboxes, sandboxID) {
		meta.Sandboxes = append(meta.Sandboxes, sandboxID)
	}
	meta.Rebuilds++
	meta.UpdatedAt = now
}

func tally(meta *Meta, t Tally) {
	meta.Replays += t.Replays
	meta.Divergences += t.Divergences
}

// pruneVictims picks the IDs Prune deletes.
func pruneVictims(metas []Meta, olderThan time.Time, maxN int) []string {
	sort.Slice(metas, func(i, j int) bool { return metas[i].UpdatedAt.Before(metas[j].UpdatedAt) })
	var out []string
	keep := metas
	for len(keep) > 0 && !olderThan.IsZero() && keep[0].UpdatedAt.Before(olderThan) {
		out = append(out, keep[0].ID)
		keep = keep[1:]
	}
	for maxN > 0 && len(keep) > maxN {
		out = append(out, keep[0].ID)
		keep = keep[1:]
	}
	return out
}
