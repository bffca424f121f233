package e2b

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/e2bapi"
	"github.com/dsec-dev/dsec/internal/frontend/listpage"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Default timeouts (seconds) of E2B's API.
const (
	defaultTimeoutV2     = 300 // POST /v2/sandboxes, connect
	defaultTimeoutLegacy = 15  // POST /sandboxes, resume
	defaultListLimit     = 100
	maxListLimit         = 1000
)

type route struct {
	pattern string
	handler http.HandlerFunc
}

func (h *Handler) controlRoutes() []route {
	const sb = "/sandboxes/{id}"
	return []route{
		{"GET /health", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		}},
		{"POST /sandboxes", h.create(defaultTimeoutLegacy)},
		{"POST /v2/sandboxes", h.create(defaultTimeoutV2)},
		{"GET /sandboxes", h.listLegacy},
		{"GET /v2/sandboxes", h.list},
		{"GET " + sb, h.get},
		{"DELETE " + sb, h.kill},
		{"POST " + sb + "/timeout", h.setTimeout},
		{"POST " + sb + "/refreshes", h.refresh},
		{"POST " + sb + "/pause", h.pause},
		{"POST " + sb + "/resume", h.resume},
		{"POST " + sb + "/connect", h.connect(0)},
		{"POST /v2" + sb + "/connect", h.connect(defaultTimeoutV2)},
		{"GET " + sb + "/metrics", h.metrics},
		{"PUT " + sb + "/network", h.updateNetwork},
	}
}

// serveControl authenticates and routes a control-plane request.
func (h *Handler) serveControl(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/health" && !h.authorized(r) && !h.signedUpload(r) {
		h.writeAPIError(w, r, http.StatusUnauthorized, "missing or invalid API key ("+APIKeyHeader+" carries a dsec token)")
		return
	}
	if _, pattern := h.control.Handler(r); pattern == "" {
		h.writeAPIError(w, r, http.StatusNotFound, fmt.Sprintf("%s %s is not part of dsec's E2B API", r.Method, r.URL.Path))
		return
	}
	h.control.ServeHTTP(w, r)
}

// decodeBody decodes a JSON body into v; an empty body leaves v as it is and
// unknown fields are ignored (E2B adds fields over time).
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		return err
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return errdefs.Invalid("malformed JSON body: %v", err)
	}
	return nil
}

// envOf is a sandbox's optional environment variables.
func envOf(env *e2bapi.EnvVars) map[string]string {
	if env == nil {
		return nil
	}
	return *env
}

// timeoutSeconds checks an optional timeout and applies the default.
func timeoutSeconds(t *int64, def int64) (int64, error) {
	if t == nil || *t == 0 {
		return def, nil
	}
	if *t < 0 {
		return 0, errdefs.Invalid("timeout must not be negative")
	}
	return *t, nil
}

func (h *Handler) create(defTimeout int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req e2bapi.NewSandbox // and NewSandboxV2, the same fields dsec reads
		if err := decodeBody(w, r, &req); err != nil {
			h.writeErr(w, r, err)
			return
		}
		var secs *int64
		if req.Timeout != nil {
			s := int64(*req.Timeout)
			secs = &s
		}
		timeout, err := timeoutSeconds(secs, defTimeout)
		if err != nil {
			h.writeErr(w, r, err)
			return
		}
		autoPause := req.AutoPause != nil && *req.AutoPause
		autoResume := req.AutoResume != nil && req.AutoResume.Enabled
		switch {
		case req.TemplateID == "":
			h.writeAPIError(w, r, http.StatusBadRequest, "templateID is required")
			return
		case req.VolumeMounts != nil && len(*req.VolumeMounts) > 0:
			h.writeAPIError(w, r, http.StatusBadRequest, "volume mounts are not supported by dsec")
			return
		case autoResume && !autoPause:
			h.writeAPIError(w, r, http.StatusBadRequest, "autoResume needs autoPause")
			return
		}
		labels := map[string]string{}
		var metadata map[string]string
		if req.Metadata != nil {
			metadata = *req.Metadata
		}
		for k, v := range metadata {
			if strings.HasPrefix(k, labelPrefix) {
				h.writeAPIError(w, r, http.StatusBadRequest, fmt.Sprintf("metadata key %q uses the reserved prefix %q", k, labelPrefix))
				return
			}
			labels[k] = v
		}
		action := actionKill
		if autoPause {
			action = actionPause
			if req.AutoPauseMemory != nil && !*req.AutoPauseMemory {
				action = actionPauseFS
			}
		}
		labels[labelTemplate] = req.TemplateID
		labels[labelTimeout] = strconv.FormatInt(timeout, 10)
		labels[labelOnTimeout] = action
		if autoResume {
			labels[labelAutoResume] = "true"
		}
		netPolicy, err := egressPolicy(req.AllowInternetAccess, req.Network)
		if err != nil {
			h.writeErr(w, r, err)
			return
		}
		if req.AllowInternetAccess != nil {
			labels[labelInternet] = strconv.FormatBool(*req.AllowInternetAccess)
		}
		if req.Network != nil && req.Network.AllowPublicTraffic != nil && !*req.Network.AllowPublicTraffic {
			labels[labelPrivate] = "true"
		}
		if req.Network != nil && req.Network.MaskRequestHost != nil && *req.Network.MaskRequestHost != "" {
			labels[labelHostMask] = *req.Network.MaskRequestHost
		}
		tmpl, err := h.resolveTemplate(r.Context(), req.TemplateID)
		if err != nil {
			h.writeErr(w, r, err)
			return
		}
		creq := api.CreateSandboxRequest{Backend: tmpl.backend, Image: tmpl.image, Env: envOf(req.EnvVars), Labels: labels,
			CPU: tmpl.cpu, MemoryBytes: tmpl.memoryBytes,
			TTLSeconds: timeout, OnExpiry: expiryOf(action), Network: netPolicy,
			StartCmd: tmpl.start, ReadyCmd: tmpl.ready,
			// E2B's user has passwordless sudo: setuid programs must work.
			AllowSetuid: true}
		sb, err := h.svc.Create(r.Context(), creq)
		if err != nil && errdefs.Is(err, api.CodeNotImplemented) && req.AllowInternetAccess == nil && !egressAsked(req.Network) {
			// Internet access by default (not asked for) on a node or
			// backend without egress: the sandbox gets loopback only, as
			// /v1's do, and its detail does not claim internet access.
			h.log.DebugContext(r.Context(), "e2b create: no egress on this node; loopback only", "err", err)
			creq.Network = nil
			sb, err = h.svc.Create(r.Context(), creq)
		}
		if err != nil {
			h.writeErr(w, r, err)
			return
		}
		if err := h.startTemplateService(r.Context(), sb, req.TemplateID, creq.Env); err != nil {
			if derr := h.svc.Delete(session.WithoutStep(r.Context()), sb.ID); derr != nil {
				h.log.WarnContext(r.Context(), "e2b create: removing a sandbox whose template service failed", "sandbox", sb.ID, "err", derr)
			}
			h.writeErr(w, r, err)
			return
		}
		writeJSON(w, http.StatusCreated, h.sandboxAnswer(sb))
	}
}

// lookup returns sandbox {id}, answering 404 for an unknown or exited one.
func (h *Handler) lookup(w http.ResponseWriter, r *http.Request) (api.Sandbox, bool) {
	id := r.PathValue("id")
	sb, err := h.svc.Get(session.WithoutStep(r.Context()), id)
	if err == nil && !visible(sb) {
		err = errdefs.NotFound("sandbox %q has exited", id)
	}
	if err != nil {
		if errdefs.Is(err, api.CodeNotFound) {
			h.writeAPIError(w, r, http.StatusNotFound, fmt.Sprintf("sandbox %q not found", id))
		} else {
			h.writeErr(w, r, err)
		}
		return api.Sandbox{}, false
	}
	return sb, true
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	if sb, ok := h.lookup(w, r); ok {
		writeJSON(w, http.StatusOK, h.detail(sb))
	}
}

func (h *Handler) kill(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := h.svc.Delete(r.Context(), id); err != nil {
		if errdefs.Is(err, api.CodeNotFound) {
			h.writeAPIError(w, r, http.StatusNotFound, fmt.Sprintf("sandbox %q not found", id))
			return
		}
		h.writeErr(w, r, err)
		return
	}
	h.forget(id)
	w.WriteHeader(http.StatusNoContent)
}

// lifecycleRequest is the body of the timeout, refresh, pause, resume and
// connect calls (each uses some of the fields). It stays dsec's own: the
// generated bodies (e2bapi.ConnectSandbox, the timeout call's) hold timeout as
// a required int32, where dsec tells an absent timeout (no deadline for a
// sandbox made through /v1, the default) from 0.
type lifecycleRequest struct {
	Timeout  *int64 `json:"timeout"`
	Duration *int64 `json:"duration"`
	Memory   *bool  `json:"memory"`
}

// begin decodes a lifecycle call's body into req and looks its sandbox up; it
// answers the request itself (and returns false) on bad input or no sandbox.
func (h *Handler) begin(w http.ResponseWriter, r *http.Request, req *lifecycleRequest) (api.Sandbox, bool) {
	if err := decodeBody(w, r, req); err != nil {
		h.writeErr(w, r, err)
		return api.Sandbox{}, false
	}
	if (req.Timeout != nil && *req.Timeout < 0) || (req.Duration != nil && *req.Duration < 0) {
		h.writeAPIError(w, r, http.StatusBadRequest, "timeout must not be negative")
		return api.Sandbox{}, false
	}
	return h.lookup(w, r)
}

// in returns secs, or def when secs is absent or 0.
func in(secs *int64, def int64) int64 {
	s, _ := timeoutSeconds(secs, def)
	return s
}

// refuseDiskOnlyResume answers a resume that asks to drop memory (E2B's
// "reboot"), which dsec cannot do, rather than silently keeping it.
func (h *Handler) refuseDiskOnlyResume(w http.ResponseWriter, r *http.Request, req lifecycleRequest) bool {
	if req.Memory != nil && !*req.Memory {
		h.writeAPIError(w, r, http.StatusBadRequest, "resuming from disk state only (memory: false) is not supported by dsec")
		return true
	}
	return false
}

func (h *Handler) setTimeout(w http.ResponseWriter, r *http.Request) {
	var req lifecycleRequest
	sb, ok := h.begin(w, r, &req)
	if !ok {
		return
	}
	if req.Timeout == nil {
		h.writeAPIError(w, r, http.StatusBadRequest, "timeout (seconds) is required")
		return
	}
	// A paused sandbox has no deadline; resuming gives it one.
	if sb.State != api.StatePaused {
		if err := h.setDeadline(r.Context(), sb, *req.Timeout, false); err != nil {
			h.writeErr(w, r, err)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) refresh(w http.ResponseWriter, r *http.Request) {
	var req lifecycleRequest
	sb, ok := h.begin(w, r, &req)
	if !ok {
		return
	}
	if sb.State == api.StateRunning && (e2bMade(sb) || req.Duration != nil) {
		if err := h.setDeadline(r.Context(), sb, in(req.Duration, defaultTimeoutLegacy), true); err != nil {
			h.writeErr(w, r, err)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) pause(w http.ResponseWriter, r *http.Request) {
	var req lifecycleRequest
	sb, ok := h.begin(w, r, &req)
	if !ok {
		return
	}
	if sb.State == api.StatePaused {
		h.writeAPIError(w, r, http.StatusConflict, fmt.Sprintf("sandbox %q is already paused", sb.ID))
		return
	}
	// memory false: a filesystem-only pause (processes ended, memory freed,
	// files kept; resume boots afresh); a backend without it answers
	// not_implemented, naming itself.
	var err error
	if req.Memory != nil && !*req.Memory {
		_, err = h.svc.PauseWith(r.Context(), sb.ID, api.PauseRequest{Memory: req.Memory})
	} else {
		_, err = h.svc.Pause(r.Context(), sb.ID)
	}
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	if err := h.clearDeadline(r.Context(), sb.ID); err != nil {
		h.writeErr(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) resume(w http.ResponseWriter, r *http.Request) {
	var req lifecycleRequest
	sb, ok := h.begin(w, r, &req)
	if !ok {
		return
	}
	if sb.State != api.StatePaused {
		h.writeAPIError(w, r, http.StatusConflict, fmt.Sprintf("sandbox %q is already running", sb.ID))
		return
	}
	if h.refuseDiskOnlyResume(w, r, req) {
		return
	}
	sb, err := h.svc.Resume(r.Context(), sb.ID)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	if err := h.setDeadline(r.Context(), sb, in(req.Timeout, defaultTimeoutLegacy), false); err != nil {
		h.writeErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, h.sandboxAnswer(sb))
}

// connect answers with the sandbox, resuming it when paused (201) and extending
// its deadline to at least timeout from now. def 0 means the timeout is required.
func (h *Handler) connect(def int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req lifecycleRequest
		sb, ok := h.begin(w, r, &req)
		if !ok {
			return
		}
		if def == 0 && req.Timeout == nil {
			h.writeAPIError(w, r, http.StatusBadRequest, "timeout is required")
			return
		}
		status, secs := http.StatusOK, int64(0)
		if sb.State == api.StatePaused {
			if h.refuseDiskOnlyResume(w, r, req) {
				return
			}
			var err error
			if sb, err = h.svc.Resume(r.Context(), sb.ID); err != nil {
				h.writeErr(w, r, err)
				return
			}
			secs, status = resumedTimeout(sb), http.StatusCreated
		}
		// A sandbox made through /v1 gets a deadline only when asked for one.
		if e2bMade(sb) || req.Timeout != nil {
			secs = max(secs, in(req.Timeout, max(def, defaultTimeoutLegacy)))
		}
		if secs > 0 {
			if err := h.setDeadline(r.Context(), sb, secs, true); err != nil {
				h.writeErr(w, r, err)
				return
			}
		}
		writeJSON(w, status, h.sandboxAnswer(sb))
	}
}

// listQuery is the parsed filter of GET /v2/sandboxes.
type listQuery struct {
	metadata     map[string]string
	states       []string
	template     string
	startedAfter time.Time
	asc          bool
	limit        int
	after        listpage.Cursor // zero: from the start
}

// parseMetadataQuery reads E2B's metadata filter: a query string ("k=v&k2=v2")
// whose keys and values are themselves URL-encoded.
func parseMetadataQuery(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	vals, err := url.ParseQuery(s)
	if err != nil {
		return nil, errdefs.Invalid("malformed metadata filter: %v", err)
	}
	md := map[string]string{}
	for k, vs := range vals {
		dk, err1 := url.QueryUnescape(k)
		dv, err2 := url.QueryUnescape(vs[len(vs)-1])
		if err1 != nil || err2 != nil {
			return nil, errdefs.Invalid("malformed metadata filter %q", s)
		}
		md[dk] = dv
	}
	return md, nil
}

func parseListQuery(q url.Values, legacy bool) (listQuery, error) {
	lq := listQuery{limit: defaultListLimit}
	md, err := parseMetadataQuery(q.Get("metadata"))
	if err != nil {
		return lq, err
	}
	lq.metadata = md
	if legacy {
		lq.states, lq.limit = []string{api.StateRunning}, 0
		return lq, nil
	}
	for _, v := range q["state"] {
		for _, s := range strings.Split(v, ",") {
			switch s = strings.TrimSpace(s); s {
			case api.StateRunning, api.StatePaused:
				lq.states = append(lq.states, s)
			case "":
			default:
				return lq, errdefs.Invalid("unknown state %q (running or paused)", s)
			}
		}
	}
	if len(lq.states) == 0 {
		lq.states = []string{api.StateRunning, api.StatePaused}
	}
	lq.template = q.Get("template")
	if s := q.Get("startedAfter"); s != "" {
		if lq.startedAfter, err = time.Parse(time.RFC3339Nano, s); err != nil {
			return lq, errdefs.Invalid("startedAfter must be an RFC 3339 time")
		}
	}
	switch q.Get("order") {
	case "", "desc":
	case "asc":
		lq.asc = true
	default:
		return lq, errdefs.Invalid("order must be asc or desc")
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxListLimit {
			return lq, errdefs.Invalid("limit must be between 1 and %d", maxListLimit)
		}
		lq.limit = n
	}
	if s := q.Get("nextToken"); s != "" {
		var ok bool
		if lq.after, ok = listpage.Parse(s); !ok {
			return lq, errdefs.Invalid("malformed nextToken")
		}
	}
	return lq, nil
}

func (lq listQuery) match(sb api.Sandbox) bool {
	if !slices.Contains(lq.states, sb.State) {
		return false
	}
	if lq.template != "" && lq.template != templateOf(sb) && lq.template != sb.Image {
		return false
	}
	if !lq.startedAfter.IsZero() && sb.CreatedAt.Before(lq.startedAfter) {
		return false
	}
	for k, v := range lq.metadata {
		if got, ok := sb.Labels[k]; !ok || got != v || strings.HasPrefix(k, labelPrefix) {
			return false
		}
	}
	return true
}

func (h *Handler) listLegacy(w http.ResponseWriter, r *http.Request) { h.serveList(w, r, true) }
func (h *Handler) list(w http.ResponseWriter, r *http.Request)       { h.serveList(w, r, false) }

func (h *Handler) serveList(w http.ResponseWriter, r *http.Request, legacy bool) {
	lq, err := parseListQuery(r.URL.Query(), legacy)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	all, err := h.svc.List(r.Context())
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	page, next, _ := listpage.Page(all, listpage.Query{
		Match: func(sb *api.Sandbox) bool { return lq.match(*sb) }, Desc: !lq.asc, After: lq.after, Limit: lq.limit})
	out := make([]e2bapi.ListedSandbox, 0, len(page))
	for _, sb := range page {
		out = append(out, listed(sb))
	}
	if !next.Zero() {
		w.Header().Set(NextTokenHeader, next.String())
	}
	writeJSON(w, http.StatusOK, out)
}
