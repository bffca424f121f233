package e2b

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/e2bapi"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// E2B's snapshots are dsec environments committed from a sandbox
// (session.Sandboxes.Commit): a filesystem snapshot, files kept and processes
// not, as E2B documents. The environment is the snapshot: its name is the
// snapshot ID, so Sandbox.create(snapshotId) creates from it as from any
// template, it lives in the node's (a cluster's: etcd's) environment store
// and outlives its sandbox, and every API server lists and deletes it without
// front-end state. The name says what E2B's list filters ask:
//
//	e2b-snap-<16 hex of the sandbox ID>-<8 random hex>    unnamed
//	e2b-snap-<16 hex of the sandbox ID>.<name>            named
//
// Deleting a snapshot a sandbox still runs on is refused (409, the
// environment store's conflict); deleting an unknown one is 404, which the SDK
// reads as "not found" (false).
//
// A fork (session.Sandboxes.Fork) gives count new sandboxes on the parent's
// node that start from the parent's files with fresh processes; the parent
// runs on. dsec's fork is all or nothing: every child starts, or the call
// fails and none is left.

const (
	snapshotPrefix = "e2b-snap-"
	// sandboxKeyLen is the length of the sandbox ID's random part in a
	// snapshot name ("sb-<16 hex>.<node>").
	sandboxKeyLen = 16
	// maxSnapshotNameLen is what the environment name limit (64) leaves a
	// snapshot's own name.
	maxSnapshotNameLen = 64 - len(snapshotPrefix) - sandboxKeyLen - 1
	defaultForkCount   = 1
)

// snapshotRoutes are the snapshot and fork routes (see Handler.New).
func (h *Handler) snapshotRoutes() []route {
	return []route{
		{"POST /sandboxes/{id}/snapshots", h.createSnapshot},
		{"GET /snapshots", h.listSnapshots},
		{"DELETE /templates/{templateID}", h.deleteTemplate},
		{"POST /sandboxes/{id}/fork", h.fork},
	}
}

// sandboxKey is the random part of a sandbox ID ("" for an ID that has none).
func sandboxKey(id string) string {
	local, _, _ := strings.Cut(id, ".")
	k, ok := strings.CutPrefix(local, "sb-")
	if !ok || len(k) != sandboxKeyLen {
		return ""
	}
	if _, err := hex.DecodeString(k); err != nil {
		return ""
	}
	return k
}

// snapshot is one snapshot as its environment's name describes it.
type snapshot struct {
	id   string // the environment's name
	key  string // its sandbox's key (sandboxKey)
	name string // the name it was given; "" for none
}

// parseSnapshot reads an environment name; ok is false for one that is not a
// snapshot's.
func parseSnapshot(env string) (snapshot, bool) {
	rest, ok := strings.CutPrefix(env, snapshotPrefix)
	if !ok || len(rest) < sandboxKeyLen+2 {
		return snapshot{}, false
	}
	key, sep, tail := rest[:sandboxKeyLen], rest[sandboxKeyLen], rest[sandboxKeyLen+1:]
	if _, err := hex.DecodeString(key); err != nil || strings.ToLower(key) != key {
		return snapshot{}, false
	}
	s := snapshot{id: env, key: key}
	switch sep {
	case '.':
		s.name = tail
	case '-':
	default:
		return snapshot{}, false
	}
	return s, true
}

// info is the snapshot as E2B's SnapshotInfo.
func (s snapshot) info() e2bapi.SnapshotInfo {
	names := []string{}
	if s.name != "" {
		names = append(names, s.name)
	}
	return e2bapi.SnapshotInfo{SnapshotID: s.id, Names: names}
}

// matchName says whether E2B's list filter q names s: its name or its ID,
// with or without a "namespace/" prefix and a ":tag" suffix.
func (s snapshot) matchName(q string) bool {
	if i := strings.LastIndexByte(q, '/'); i >= 0 {
		q = q[i+1:]
	}
	if i := strings.IndexByte(q, ':'); i >= 0 {
		q = q[:i]
	}
	return q == s.id || (s.name != "" && q == s.name)
}

// snapshotName is the environment name of a new snapshot of sandbox id.
func snapshotName(id string, name *string) (string, error) {
	key := sandboxKey(id)
	if key == "" {
		return "", errdefs.Invalid("sandbox %q has no dsec sandbox ID to snapshot", id)
	}
	if name == nil || *name == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		return snapshotPrefix + key + "-" + hex.EncodeToString(b[:]), nil
	}
	n := *name
	if len(n) > maxSnapshotNameLen || !validSnapshotName(n) {
		return "", errdefs.Invalid("snapshot name %q: 1..%d characters of a-z, 0-9, '.', '_' and '-', starting with a letter or digit", n, maxSnapshotNameLen)
	}
	return snapshotPrefix + key + "." + n, nil
}

func validSnapshotName(n string) bool {
	for i := 0; i < len(n); i++ {
		c := n[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || (c != '.' && c != '_' && c != '-')) {
			return false
		}
	}
	return n != ""
}

// snapshotExclude is what a snapshot leaves out: /run, the runtime state a
// sandbox started from the snapshot must not find (pid files, sockets).
// Everything else the sandbox wrote is kept, /tmp and caches included.
var snapshotExclude = []string{"/run"}

func (h *Handler) createSnapshot(w http.ResponseWriter, r *http.Request) {
	var req e2bapi.SandboxSnapshotRequest
	if err := decodeBody(w, r, &req); err != nil {
		h.writeErr(w, r, err)
		return
	}
	sb, ok := h.lookup(w, r)
	if !ok {
		return
	}
	name, err := snapshotName(sb.ID, req.Name)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	_, err = h.svc.Commit(r.Context(), sb.ID, api.CommitRequest{Name: name, Exclude: snapshotExclude, NoDefaultExclude: true})
	switch {
	case errdefs.Is(err, api.CodeNotImplemented):
		h.writeAPIError(w, r, http.StatusNotImplemented, fmt.Sprintf("sandbox %q cannot be snapshotted: its backend (%s) has no commit (%v)", sb.ID, sb.Backend, err))
		return
	case errdefs.Is(err, api.CodeAlreadyExists):
		h.writeAPIError(w, r, http.StatusConflict, fmt.Sprintf("snapshot %q of sandbox %q exists: delete it first or choose another name", name, sb.ID))
		return
	case err != nil:
		h.writeErr(w, r, err)
		return
	}
	s, _ := parseSnapshot(name)
	writeJSON(w, http.StatusCreated, s.info())
}

// snapshots lists the snapshots of the environment store, by ID.
func (h *Handler) snapshots(ctx context.Context) ([]snapshot, error) {
	imgs, err := h.svc.Images(session.WithoutStep(ctx))
	if err != nil {
		return nil, err
	}
	var out []snapshot
	for _, img := range imgs {
		if s, ok := parseSnapshot(img.Name); ok {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b snapshot) int { return strings.Compare(a.id, b.id) })
	return out, nil
}

// listSnapshots is GET /snapshots: filtered by source sandbox and by name,
// in pages of limit (X-Next-Token is the last ID of the page).
func (h *Handler) listSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := defaultListLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxListLimit {
			h.writeAPIError(w, r, http.StatusBadRequest, fmt.Sprintf("limit must be between 1 and %d", maxListLimit))
			return
		}
		limit = n
	}
	var key string
	if id := q.Get("sandboxID"); id != "" {
		if key = sandboxKey(id); key == "" {
			writeJSON(w, http.StatusOK, []e2bapi.SnapshotInfo{}) // no dsec sandbox: no snapshots
			return
		}
	}
	name, after := q.Get("name"), q.Get("nextToken")
	all, err := h.snapshots(r.Context())
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	out := []e2bapi.SnapshotInfo{}
	for _, s := range all {
		if (key != "" && s.key != key) || (name != "" && !s.matchName(name)) || (after != "" && s.id <= after) {
			continue
		}
		if len(out) == limit {
			w.Header().Set(NextTokenHeader, out[len(out)-1].SnapshotID)
			break
		}
		out = append(out, s.info())
	}
	writeJSON(w, http.StatusOK, out)
}

// deleteTemplate is DELETE /templates/{templateID}, which E2B's SDK calls to
// delete a snapshot and E2B's CLI to delete a template: a snapshot ID deletes
// the snapshot, the ID of a template built through E2B's template builds
// removes its environment. Other dsec images are removed through /v1 only.
func (h *Handler) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("templateID")
	if _, ok := parseSnapshot(id); ok {
		h.deleteSnapshot(w, r)
		return
	}
	var img *api.Image
	if templateName.MatchString(id) && id != baseTemplate {
		var err error
		if img, err = h.templateImage(r.Context(), id); err != nil {
			h.writeErr(w, r, err)
			return
		}
	}
	if !isTemplate(img) {
		h.writeAPIError(w, r, http.StatusNotFound, fmt.Sprintf("template %q not found (dsec deletes snapshots and templates built through E2B's API; other images are removed with dsec image rm)", id))
		return
	}
	tagged, err := h.tagEnvs(r.Context(), id)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	for _, img := range tagged {
		if img.Name == id {
			continue
		}
		if err := h.svc.RemoveImage(r.Context(), img.Name); err != nil && !errdefs.Is(err, api.CodeNotFound) {
			h.writeRemoveErr(w, r, "template", id+":"+tagOf(img), err)
			return
		}
	}
	h.removeImage(w, r, "template", id)
}

// removeImage removes image id, a snapshot or template (what, for errors),
// and answers 204 (errors: see writeRemoveErr).
func (h *Handler) removeImage(w http.ResponseWriter, r *http.Request, what, id string) {
	defer h.templates.forget()
	if err := h.svc.RemoveImage(r.Context(), id); err != nil {
		h.writeRemoveErr(w, r, what, id, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// writeRemoveErr answers the error of removing what id: 404 when it is gone,
// 409 while a sandbox runs on it.
func (h *Handler) writeRemoveErr(w http.ResponseWriter, r *http.Request, what, id string, err error) {
	switch {
	case errdefs.Is(err, api.CodeNotFound):
		h.writeAPIError(w, r, http.StatusNotFound, fmt.Sprintf("%s %q not found", what, id))
	case errdefs.Is(err, api.CodeConflict):
		h.writeAPIError(w, r, http.StatusConflict, fmt.Sprintf("%s %q is in use by a sandbox: kill its sandboxes first (%v)", what, id, err))
	default:
		h.writeErr(w, r, err)
	}
}

// deleteSnapshot deletes snapshot r's templateID.
func (h *Handler) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("templateID")
	all, err := h.snapshots(r.Context())
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	if !slices.ContainsFunc(all, func(s snapshot) bool { return s.id == id }) {
		h.writeAPIError(w, r, http.StatusNotFound, fmt.Sprintf("snapshot %q not found", id))
		return
	}
	h.removeImage(w, r, "snapshot", id)
}

// forkResult is E2B's SandboxForkResult with the sandbox as create answers it.
type forkResult struct {
	Sandbox *sandboxAnswer `json:"sandbox,omitempty"`
	Error   *e2bapi.Error  `json:"error,omitempty"`
}

// fork is POST /sandboxes/{id}/fork: count children (default 1) that run for
// timeout seconds (default: the parent's creation timeout).
func (h *Handler) fork(w http.ResponseWriter, r *http.Request) {
	var req e2bapi.SandboxForkRequest
	if err := decodeBody(w, r, &req); err != nil {
		h.writeErr(w, r, err)
		return
	}
	count := defaultForkCount
	if req.Count != nil {
		count = int(*req.Count)
	}
	switch {
	case count < 1:
		h.writeAPIError(w, r, http.StatusBadRequest, fmt.Sprintf("count must be at least 1, got %d", count))
		return
	case req.Timeout != nil && *req.Timeout < 0:
		h.writeAPIError(w, r, http.StatusBadRequest, "timeout must not be negative")
		return
	}
	parent, ok := h.lookup(w, r)
	if !ok {
		return
	}
	secs := resumedTimeout(parent)
	if req.Timeout != nil && *req.Timeout > 0 {
		secs = int64(*req.Timeout)
	}
	o := &api.CreateSandboxRequest{TTLSeconds: secs}
	if e2bMade(parent) && secs > 0 {
		o.Labels = map[string]string{labelTimeout: strconv.FormatInt(secs, 10)}
	}
	res, err := h.svc.Fork(r.Context(), parent.ID, api.ForkRequest{Count: count, Overrides: o})
	switch {
	case errdefs.Is(err, api.CodeNotImplemented):
		h.writeAPIError(w, r, http.StatusNotImplemented, fmt.Sprintf("sandbox %q cannot be forked: its backend (%s) has no fork (%v)", parent.ID, parent.Backend, err))
		return
	case err != nil:
		h.writeErr(w, r, err)
		return
	}
	out := make([]forkResult, 0, len(res.Children))
	for _, c := range res.Children {
		// The child's deadline acts as the parent's (kill or pause).
		if secs > 0 {
			if err := h.setDeadline(r.Context(), c, secs, false); err != nil {
				_ = h.svc.Delete(session.WithoutStep(r.Context()), c.ID)
				out = append(out, forkResult{Error: &e2bapi.Error{Code: int32(httpStatus(err)), Message: err.Error()}})
				continue
			}
		}
		a := h.sandboxAnswer(c)
		out = append(out, forkResult{Sandbox: &a})
	}
	writeJSON(w, http.StatusCreated, out)
}
