package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/dsec-dev/dsec/internal/tracing"
	"github.com/dsec-dev/dsec/pkg/api"
)

// ErrorHeader is the header dsec's API sets on its own error answers (its value
// is the error code; internal/frontend/v1.ErrorHeader).
const ErrorHeader = "X-Dsec-Error"

var methods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodOptions}

// HTTP serves next, counting each request by route pattern (route maps a
// request to it; nil or "" counts as "other"), method and status, timing it,
// and counting dsec's error answers by code and infrastructure flag.
func (m *Metrics) HTTP(route func(*http.Request) string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		rt := ""
		if route != nil {
			rt = route(r)
		}
		if rt == "" {
			rt = other
		}
		method := bounded(r.Method, methods)
		sw := tracing.NewStatusWriter(w)
		next.ServeHTTP(sw, r)
		m.httpRequests.WithLabelValues(rt, method, strconv.Itoa(sw.Status())).Inc()
		m.httpSeconds.WithLabelValues(rt, method).Observe(seconds(t0))
		if code := w.Header().Get(ErrorHeader); code != "" {
			e := api.NewError(api.Code(code), "")
			m.errors.WithLabelValues(codeLabel(e.Code), strconv.FormatBool(e.Infrastructure)).Inc()
		}
	})
}

// RPC implements noderpc.Observer: one node RPC request. procedure arrives
// bounded (the handler's own names or "other"); code is bounded here.
func (m *Metrics) RPC(procedure, code string, d time.Duration) {
	if code != ResultOK {
		code = codeLabel(api.Code(code))
	}
	m.rpcRequests.WithLabelValues(procedure, code).Inc()
	m.rpcSeconds.WithLabelValues(procedure).Observe(d.Seconds())
}
