package httpkit_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/auth"
	"github.com/dsec-dev/dsec/internal/httpkit"
	"github.com/dsec-dev/dsec/pkg/api"
)

func TestBearerAuth(t *testing.T) {
	var gotProject string
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotProject = auth.ProjectOf(r.Context())
		_, _ = io.WriteString(w, "in")
	})
	ident := httpkit.BearerAuth{
		Identify: func(tok string) (string, bool) { return "p1", tok == "s3cret" },
		Open:     func(r *http.Request) bool { return r.URL.Path == "/health" },
	}
	cases := []struct {
		name, path, header string
		h                  http.Handler
		status             int
		project            string
	}{
		{"static token", "/", "Bearer tok", httpkit.Token("tok").Wrap(ok), 200, ""},
		{"scheme case", "/", "bearer tok", httpkit.Token("tok").Wrap(ok), 200, ""},
		{"wrong token", "/", "Bearer tox", httpkit.Token("tok").Wrap(ok), 401, ""},
		{"no header", "/", "", httpkit.Token("tok").Wrap(ok), 401, ""},
		{"basic scheme", "/", "Basic tok", httpkit.Token("tok").Wrap(ok), 401, ""},
		{"empty token accepts nothing", "/", "Bearer ", httpkit.Token("").Wrap(ok), 401, ""},
		{"project", "/", "Bearer s3cret", ident.Wrap(ok), 200, "p1"},
		{"open route", "/health", "", ident.Wrap(ok), 200, ""},
		{"match", "/", "Bearer a", httpkit.Match(func(s string) bool { return s == "a" }).Wrap(ok), 200, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gotProject = ""
			r := httptest.NewRequest("GET", c.path, nil)
			if c.header != "" {
				r.Header.Set("Authorization", c.header)
			}
			w := httptest.NewRecorder()
			c.h.ServeHTTP(w, r)
			if w.Code != c.status {
				t.Fatalf("status %d, want %d (%s)", w.Code, c.status, w.Body)
			}
			if gotProject != c.project {
				t.Errorf("project %q, want %q", gotProject, c.project)
			}
			if c.status != 401 {
				return
			}
			if w.Header().Get("WWW-Authenticate") != httpkit.Realm {
				t.Errorf("challenge %q", w.Header().Get("WWW-Authenticate"))
			}
			var body api.ErrorBody
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Error == nil || body.Error.Code != api.CodeUnauthorized {
				t.Errorf("body %s (%v)", w.Body, err)
			}
			if w.Header().Get(httpkit.ErrorHeader) != string(api.CodeUnauthorized) {
				t.Errorf("error header %q", w.Header().Get(httpkit.ErrorHeader))
			}
		})
	}
}

func TestDenyOverride(t *testing.T) {
	h := httpkit.Token("tok").With(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	}).Wrap(http.NotFoundHandler())
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if w.Code != http.StatusTeapot || w.Header().Get("WWW-Authenticate") != httpkit.Realm {
		t.Fatalf("status %d challenge %q", w.Code, w.Header().Get("WWW-Authenticate"))
	}
}

func TestLimitBody(t *testing.T) {
	h := httpkit.LimitBody(8, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			return
		}
		_, _ = io.WriteString(w, "read")
	}))
	for _, c := range []struct {
		body   string
		chunk  bool
		status int
	}{{"short", false, 200}, {"much too long", false, 413}, {"much too long", true, 413}} {
		r := httptest.NewRequest("POST", "/", strings.NewReader(c.body))
		if c.chunk {
			r.ContentLength = -1 // unknown length: the read fails at the limit
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.status {
			t.Errorf("body %q chunked %v: status %d, want %d", c.body, c.chunk, w.Code, c.status)
		}
	}
}
