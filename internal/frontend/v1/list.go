package v1

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/frontend/listpage"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// List paging bounds.
const (
	// MaxListLimit is the largest page GET /v1/sandboxes answers.
	MaxListLimit = 1000
)

// listQuery is GET /v1/sandboxes's query: filters, an optional page size and the
// cursor of the page to start after. No parameter at all lists every sandbox,
// oldest first, as before paging existed.
type listQuery struct {
	states   map[string]bool
	backends map[string]bool
	nodes    map[string]bool
	labels   []labelMatch
	limit    int             // 0: no paging
	desc     bool            // newest first
	after    listpage.Cursor // zero: from the start
}

type labelMatch struct {
	key, value string
	any        bool // "key" alone: the label is set, whatever its value
}

func parseCursor(s string) (listpage.Cursor, error) {
	if c, ok := listpage.Parse(s); ok {
		return c, nil
	}
	return listpage.Cursor{}, errdefs.Invalid("query parameter \"cursor\" is not a cursor this server returned: %q", s)
}

var (
	knownStates   = []string{api.StateRunning, api.StatePaused, api.StateExited, api.StatePulling, api.StateFailed}
	knownBackends = []string{api.BackendContainer, api.BackendFnCall, api.BackendMicroVM, api.BackendFullVM}
)

// parseListQuery validates every parameter: an unknown parameter, state or
// backend (one of backends), a malformed label or cursor, or a limit out of range is an
// invalid_argument naming it. Repeated or comma-separated values of state,
// backend and node match any of them; repeated labels must all match.
func parseListQuery(r *http.Request, backends []string) (listQuery, error) {
	q := listQuery{}
	for name, vals := range r.URL.Query() {
		switch name {
		case "state":
			set, err := oneOf(name, vals, knownStates)
			if err != nil {
				return q, err
			}
			q.states = set
		case "backend":
			set, err := oneOf(name, vals, backends)
			if err != nil {
				return q, err
			}
			q.backends = set
		case "node":
			q.nodes = map[string]bool{}
			for _, v := range splitValues(vals) {
				if err := session.CheckNodeName(v); err != nil {
					return q, errdefs.Invalid("query parameter \"node\": %q is not a node name", v)
				}
				q.nodes[v] = true
			}
		case "label":
			for _, v := range vals {
				k, val, hasValue := strings.Cut(v, "=")
				if k == "" {
					return q, errdefs.Invalid("query parameter \"label\" must be KEY or KEY=VALUE, got %q", v)
				}
				q.labels = append(q.labels, labelMatch{key: k, value: val, any: !hasValue})
			}
		case "limit":
			n, err := strconv.Atoi(lastValue(vals))
			if err != nil || n < 1 || n > MaxListLimit {
				return q, errdefs.Invalid("query parameter \"limit\" must be an integer from 1 to %d, got %q", MaxListLimit, lastValue(vals))
			}
			q.limit = n
		case "cursor":
			c, err := parseCursor(lastValue(vals))
			if err != nil {
				return q, err
			}
			q.after = c
		case "order":
			switch lastValue(vals) {
			case "asc", "":
			case "desc":
				q.desc = true
			default:
				return q, errdefs.Invalid("query parameter \"order\" must be asc or desc, got %q", lastValue(vals))
			}
		default:
			return q, errdefs.Invalid("unknown query parameter %q (known: state, backend, node, label, limit, cursor, order)", name)
		}
	}
	return q, nil
}

func lastValue(vals []string) string { return vals[len(vals)-1] }

// splitValues flattens repeated and comma-separated values, dropping empty ones.
func splitValues(vals []string) []string {
	return strings.FieldsFunc(strings.Join(vals, ","), func(r rune) bool { return r == ',' || r == ' ' })
}

func oneOf(name string, vals, known []string) (map[string]bool, error) {
	set := map[string]bool{}
	for _, v := range splitValues(vals) {
		ok := false
		for _, k := range known {
			ok = ok || v == k
		}
		if !ok {
			return nil, errdefs.Invalid("query parameter %q: unknown value %q (known: %s)", name, v, strings.Join(known, ", "))
		}
		set[v] = true
	}
	return set, nil
}

// match reports whether sb passes every filter.
func (q *listQuery) match(sb *api.Sandbox) bool {
	if len(q.states) > 0 && !q.states[sb.State] {
		return false
	}
	if len(q.backends) > 0 && !q.backends[sb.Backend] {
		return false
	}
	if len(q.nodes) > 0 {
		node, _ := session.NodeOf(sb.ID)
		if !q.nodes[node] {
			return false
		}
	}
	for _, l := range q.labels {
		v, ok := sb.Labels[l.key]
		if !ok || (!l.any && v != l.value) {
			return false
		}
	}
	return true
}

// page filters, orders and cuts list (listpage.Page); next is the cursor of
// the following page ("" on the last one) and total counts every match.
func (q *listQuery) page(list []api.Sandbox) (page []api.Sandbox, next string, total int) {
	page, after, total := listpage.Page(list, listpage.Query{Match: q.match, Desc: q.desc, After: q.after, Limit: q.limit})
	if !after.Zero() {
		next = after.String()
	}
	return page, next, total
}

// listSandboxes handles GET /v1/sandboxes (see listQuery).
func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) {
	backends := knownBackends
	if r.URL.Query().Has("backend") {
		// The node's own backends count too (a test node's "mock").
		if info, err := s.svc.Info(r.Context()); err == nil {
			backends = append(append([]string(nil), backends...), info.Backends...)
		}
	}
	q, err := parseListQuery(r, backends)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	list, err := s.svc.List(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	page, next, total := q.page(list)
	resp := api.ListSandboxesResponse{Sandboxes: page, NextCursor: next}
	if q.limit > 0 {
		resp.Total = &total
	}
	writeJSON(w, http.StatusOK, resp)
}
