// Package openapitest checks /v1 traffic against the OpenAPI document
// (pkg/api/openapi.yaml), the source of truth of the /v1 API: a test wraps the
// /v1 handler with Checker.Wrap, and every request the test sends and every
// answer it gets is validated (github.com/getkin/kin-openapi/openapi3filter).
// A route the document lacks, a request the document refuses but the server
// accepts, an undocumented status, content type or header, and an answer whose
// body differs from its schema (a field the document lacks included: object
// schemas are read as closed) fail the test.
package openapitest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/dsec-dev/dsec/pkg/api"
)

// maxBody bounds the bytes of a body the checker keeps; a longer body is
// checked for its status and headers only.
const maxBody = 8 << 20

// Checker holds a parsed OpenAPI document and routes requests to its
// operations.
type Checker struct {
	doc *openapi3.T
	mux *http.ServeMux // pattern per documented operation; the handler reports the match
}

// match is what the checker's mux reports for a request.
type match struct {
	route  *routers.Route
	params map[string]string
}

type matchKey struct{}

// New parses doc (OpenAPI 3.0) and reads its object schemas as closed
// (additionalProperties: false where the document says nothing), so that a
// field the server sends and the document lacks is an error.
func New(doc []byte) (*Checker, error) {
	loader := openapi3.NewLoader()
	t, err := loader.LoadFromData(doc)
	if err != nil {
		return nil, fmt.Errorf("parsing the OpenAPI document: %w", err)
	}
	if err := t.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("the OpenAPI document is invalid: %w", err)
	}
	closeSchemas(t)
	c := &Checker{doc: t, mux: http.NewServeMux()}
	for path, item := range t.Paths.Map() {
		for method, op := range item.Operations() {
			rt := &routers.Route{Spec: t, Path: path, PathItem: item, Method: method, Operation: op}
			names := paramNames(path)
			// A parameter named "path" is a file path: it spans segments, and a
			// trailing one may be empty (with its slash).
			pattern := strings.ReplaceAll(path, "{path}", "{path...}")
			report := func(_ http.ResponseWriter, r *http.Request) {
				m := r.Context().Value(matchKey{}).(*match)
				m.route = rt
				m.params = map[string]string{}
				for _, n := range names {
					m.params[n] = r.PathValue(n)
				}
			}
			c.mux.HandleFunc(method+" "+pattern, report)
			if bare, ok := strings.CutSuffix(pattern, "/{path...}"); ok {
				c.mux.HandleFunc(method+" "+bare, report)
			}
		}
	}
	return c, nil
}

// paramNames returns the {names} of an OpenAPI path.
func paramNames(path string) []string {
	var out []string
	for _, seg := range strings.Split(path, "/") {
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
			out = append(out, seg[1:len(seg)-1])
		}
	}
	return out
}

// Route returns the documented operation r calls, or nil.
func (c *Checker) Route(r *http.Request) (*routers.Route, map[string]string) {
	m := &match{}
	probe := r.Clone(context.WithValue(r.Context(), matchKey{}, m))
	probe.Body = http.NoBody
	for strings.Contains(probe.URL.Path, "//") { // the server does not clean paths (a proxied path keeps them)
		probe.URL.Path = strings.ReplaceAll(probe.URL.Path, "//", "/")
		probe.URL.RawPath = ""
	}
	// An escaped "/" in a parameter (a registry reference) stays in its
	// segment: the mux matches on the escaped path, as the server's does.
	c.mux.ServeHTTP(discard{}, probe)
	return m.route, m.params
}

// closeSchemas reads every object schema of t with properties and nothing said
// about additional ones as closed, and merges allOf compositions of objects
// into one closed schema (a closed part would refuse the other parts' fields).
func closeSchemas(t *openapi3.T) {
	seen := map[*openapi3.Schema]bool{}
	var walk func(s *openapi3.Schema)
	walkRef := func(r *openapi3.SchemaRef) {
		if r != nil && r.Value != nil {
			walk(r.Value)
		}
	}
	walk = func(s *openapi3.Schema) {
		if seen[s] {
			return
		}
		seen[s] = true
		if len(s.AllOf) > 0 && len(s.Properties) == 0 {
			merged := openapi3.Schemas{}
			var required []string
			for _, part := range s.AllOf {
				if part.Value == nil {
					continue
				}
				for k, v := range part.Value.Properties {
					merged[k] = v
				}
				required = append(required, part.Value.Required...)
			}
			if len(merged) > 0 {
				s.Type = &openapi3.Types{openapi3.TypeObject}
				s.Properties, s.Required, s.AllOf = merged, required, nil
			}
		}
		if len(s.Properties) > 0 && s.AdditionalProperties.Has == nil && s.AdditionalProperties.Schema == nil {
			s.AdditionalProperties = openapi3.AdditionalProperties{Has: openapi3.Ptr(false)}
		}
		for _, p := range s.Properties {
			walkRef(p)
		}
		walkRef(s.Items)
		walkRef(s.AdditionalProperties.Schema)
		for _, l := range []openapi3.SchemaRefs{s.OneOf, s.AnyOf, s.AllOf} {
			for _, r := range l {
				walkRef(r)
			}
		}
	}
	for _, s := range t.Components.Schemas {
		walkRef(s)
	}
	for _, item := range t.Paths.Map() {
		for _, op := range item.Operations() {
			if op.RequestBody != nil && op.RequestBody.Value != nil {
				for _, mt := range op.RequestBody.Value.Content {
					walkRef(mt.Schema)
				}
			}
			for _, resp := range op.Responses.Map() {
				if resp.Value != nil {
					for _, mt := range resp.Value.Content {
						walkRef(mt.Schema)
					}
				}
			}
		}
	}
}

// Wrap returns h behind the checker: each request and its answer are
// validated once the handler returns, and every mismatch is a t.Errorf.
func (c *Checker) Wrap(t testing.TB, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rt, params := c.Route(r)
		if rt == nil {
			rec := &recorder{ResponseWriter: w}
			h.ServeHTTP(rec, r)
			// A request outside every operation must be refused (a 4xx).
			if rec.status < 400 || rec.status >= 500 {
				t.Errorf("openapi: %s %s answered %d: no operation of the document serves it", r.Method, r.URL.Path, rec.status)
			}
			return
		}
		// The check reads a copy of the request: the server reads a body
		// without a Content-Type as the operation's one media type, and only
		// a JSON body of known length is read whole (and given back).
		vr := r.Clone(r.Context())
		vr.Body = http.NoBody
		if r.Header.Get("Content-Type") == "" && rt.Operation.RequestBody != nil && rt.Operation.RequestBody.Value != nil &&
			len(rt.Operation.RequestBody.Value.Content) == 1 {
			for mt := range rt.Operation.RequestBody.Value.Content {
				vr.Header.Set("Content-Type", mt)
			}
		}
		opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}
		if body, ok := peekJSON(r, vr.Header.Get("Content-Type")); ok {
			r.Body = io.NopCloser(bytes.NewReader(body))
			vr.Body = io.NopCloser(bytes.NewReader(body))
		} else {
			opts.ExcludeRequestBody = true
		}
		in := &openapi3filter.RequestValidationInput{Request: vr, PathParams: params, Route: rt, Options: opts}
		reqErr := openapi3filter.ValidateRequest(r.Context(), in)
		rec := &recorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		if rec.hijacked {
			return // a WebSocket or raw stream: the upgrade was validated as a request
		}
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		what := fmt.Sprintf("%s %s (operation %s %s) answered %d", r.Method, r.URL.RequestURI(), rt.Method, rt.Path, status)
		if reqErr != nil && status < 300 {
			t.Errorf("openapi: %s although the document refuses the request: %v", what, reqErr)
		}
		c.checkResponse(t, what, in, status, rec)
	})
}

// peekJSON reads a JSON request body of known length whole: the other
// bodies (NDJSON streams, archives, file contents, bodies sent chunked) are
// read by the handler as they come and are not validated.
func peekJSON(r *http.Request, contentType string) ([]byte, bool) {
	mt, _, _ := mime.ParseMediaType(contentType)
	// A body of unknown length may be a stream the client keeps open.
	if r.Body == nil || r.Body == http.NoBody || mt != "application/json" || r.ContentLength <= 0 || r.ContentLength > maxBody {
		return nil, false
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, false
	}
	return b, true
}

func (c *Checker) checkResponse(t testing.TB, what string, in *openapi3filter.RequestValidationInput, status int, rec *recorder) {
	hdr := rec.Header()
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: status, Header: hdr,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}}
	mt, _, _ := mime.ParseMediaType(hdr.Get("Content-Type"))
	body := rec.body.Bytes()
	switch {
	case in.Request.Method == http.MethodHead || status == http.StatusNoContent || status == http.StatusNotModified:
		out.Options.ExcludeResponseBody = true
	case rec.over:
		out.Options.ExcludeResponseBody = true
	case mt == "application/json":
		out.SetBodyBytes(body)
	default:
		out.Options.ExcludeResponseBody = true
		c.checkOther(t, what, in.Route, status, mt, body)
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("openapi: %s, which the document does not allow: %v\nbody: %.400s", what, err, body)
	}
}

// checkOther checks an answer that is not JSON: its content type
// is documented, and each line of an NDJSON stream matches the schema.
func (c *Checker) checkOther(t testing.TB, what string, rt *routers.Route, status int, mt string, body []byte) {
	ref := rt.Operation.Responses.Status(status)
	if ref == nil {
		ref = rt.Operation.Responses.Default()
	}
	if ref == nil || ref.Value == nil || len(ref.Value.Content) == 0 {
		return // the status check reports it
	}
	media := ref.Value.Content.Get(mt)
	if media == nil {
		t.Errorf("openapi: %s with Content-Type %q, which the document does not list (%v)", what, mt, contentTypes(ref.Value.Content))
		return
	}
	if mt != "application/x-ndjson" || media.Schema == nil || media.Schema.Value == nil {
		return
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, maxBody)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var v any
		if err := json.Unmarshal(line, &v); err != nil {
			t.Errorf("openapi: %s: NDJSON line %d is not JSON: %v", what, n, err)
			return
		}
		if err := media.Schema.Value.VisitJSON(v, openapi3.VisitAsResponse(), openapi3.MultiErrors()); err != nil {
			t.Errorf("openapi: %s: NDJSON line %d does not match the schema: %v\nline: %.400s", what, n, err, line)
		}
	}
}

func contentTypes(c openapi3.Content) []string {
	var out []string
	for k := range c {
		out = append(out, k)
	}
	return out
}

// recorder passes the answer through and keeps a copy of it.
type recorder struct {
	http.ResponseWriter
	mu       sync.Mutex
	status   int
	body     bytes.Buffer
	over     bool
	hijacked bool
}

func (r *recorder) WriteHeader(code int) {
	r.mu.Lock()
	if r.status == 0 && code >= 200 {
		r.status = code
	}
	r.mu.Unlock()
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if r.body.Len()+len(p) > maxBody {
		r.over = true
	} else {
		r.body.Write(p)
	}
	r.mu.Unlock()
	return r.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the underlying writer (Flush,
// deadlines, full duplex).
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := r.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, fmt.Errorf("openapitest: the writer cannot be hijacked")
	}
	r.mu.Lock()
	r.hijacked = true
	r.mu.Unlock()
	return hj.Hijack()
}

// discard is a ResponseWriter that drops everything (the routing probe's).
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(p []byte) (int, error) { return len(p), nil }
func (discard) WriteHeader(int)             {}

// Wrap returns h behind a checker of the committed /v1 document
// (api.OpenAPI()).
func Wrap(t testing.TB, h http.Handler) http.Handler {
	t.Helper()
	c, err := New(api.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	return c.Wrap(t, h)
}
