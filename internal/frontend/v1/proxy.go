package v1

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// sandboxProxy forwards /v1/sandboxes/{id}/http/{port}/{path...} to a TCP port
// inside the sandbox through session.Service.Dial. The outgoing URL's host encodes the sandbox
// ID (hex) and port, so the shared Transport pools connections per sandbox port and
// its dialer can recover both from the address alone.
type sandboxProxy struct {
	rp *httputil.ReverseProxy
}

// proxyTarget is what dispatch parsed from the request path.
type proxyTarget struct {
	id   string
	port int
	path string // escaped, with a leading slash
}

type proxyTargetKey struct{}

func newSandboxProxy(svc session.Service, log *slog.Logger, onError func(http.ResponseWriter, *http.Request, error)) *sandboxProxy {
	transport := &http.Transport{
		Proxy: nil, // never route sandbox traffic through an environment proxy
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return session.DialProxyAddr(ctx, svc, addr)
		},

		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       30 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true, // pass encodings through untouched
	}
	rp := &httputil.ReverseProxy{
		Transport: transport,
		Rewrite: func(pr *httputil.ProxyRequest) {
			t, _ := pr.In.Context().Value(proxyTargetKey{}).(proxyTarget)
			u := &url.URL{
				Scheme:   "http",
				Host:     session.ProxyHost(t.id, t.port),
				RawQuery: pr.In.URL.RawQuery,
			}
			if p, err := url.PathUnescape(t.path); err == nil {
				u.Path, u.RawPath = p, t.path
			} else {
				u.Path = t.path
			}
			pr.Out.URL = u
			pr.Out.Host = "localhost:" + strconv.Itoa(t.port)
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Del(api.TrajectoryHeader)
			pr.Out.Header.Del(api.StepHeader)
			pr.SetXForwarded()
		},
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Del(ErrorHeader) // only dsec's own errors carry it
			return nil
		},
		ErrorHandler: onError,
		ErrorLog:     slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return &sandboxProxy{rp: rp}
}

// proxyHTTP is the mux's handler for the proxy pattern; dispatch normally gets there
// first.
func (s *Server) proxyHTTP(w http.ResponseWriter, r *http.Request) {
	id, port, rest, ok := splitProxyPath(r.URL.EscapedPath())
	if !ok {
		s.writeError(w, r, errdefs.NotFound("no route for %s", r.URL.Path))
		return
	}
	s.serveProxy(w, r, id, port, rest)
}

// serveProxy validates the target and forwards the request.
func (s *Server) serveProxy(w http.ResponseWriter, r *http.Request, escapedID, portStr, rest string) {
	id, err := url.PathUnescape(escapedID)
	if err != nil {
		s.writeError(w, r, errdefs.Invalid("sandbox id %q: %v", escapedID, err))
		return
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		s.writeError(w, r, errdefs.Invalid("port must be an integer in 1..65535, got %q", portStr))
		return
	}
	r, sw, tagged, err := s.tagStep(w, r)
	switch {
	case err != nil:
		s.writeError(w, r, err)
	case tagged && s.trajAPI == nil:
		s.writeError(w, r, api.NewError(api.CodeNotImplemented, "this server does not log sandbox HTTP requests as trajectory steps"))
	case tagged:
		s.proxyStep(sw, r, id, port, rest)
	default:
		ctx := context.WithValue(r.Context(), proxyTargetKey{}, proxyTarget{id: id, port: port, path: rest})
		s.proxy.rp.ServeHTTP(w, r.WithContext(ctx))
	}
}

// hopHeaders are the hop-by-hop headers a proxy does not forward.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// proxyStep forwards a trajectory-tagged proxy request as one buffered HTTP step
// of the trajectory decorator (session.HTTPProxy), with the headers the reverse
// proxy would send.
func (s *Server) proxyStep(w http.ResponseWriter, r *http.Request, id string, port int, rest string) {
	if err := s.checkUpload(r); err != nil {
		s.writeError(w, r, err)
		return
	}
	hdr := r.Header.Clone()
	for _, h := range append(hopHeaders, "Authorization", api.TrajectoryHeader, api.StepHeader) {
		hdr.Del(h)
	}
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		hdr.Set("X-Forwarded-For", ip)
	}
	hdr.Set("X-Forwarded-Host", r.Host)
	proto := "http"
	if r.TLS != nil {
		proto = "https"
	}
	hdr.Set("X-Forwarded-Proto", proto)
	p := rest
	if r.URL.RawQuery != "" {
		p += "?" + r.URL.RawQuery
	}
	resp, err := s.svc.HTTP(r.Context(), id, port, session.HTTPRequest{Method: r.Method, Path: p, Header: hdr,
		Body: http.MaxBytesReader(w, r.Body, s.opts.MaxUploadBytes), ContentLength: r.ContentLength})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer resp.Body.Close()
	for _, h := range hopHeaders {
		resp.Header.Del(h)
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.Status)
	if _, err := io.Copy(w, resp.Body); err != nil {
		s.log.DebugContext(r.Context(), "proxy step: copying the answer", "err", err)
	}
}

// proxyError answers a failed proxy round trip: classified errors (no such sandbox,
// a paused one) keep their code; anything else, such as nothing listening on the
// port, is bad_gateway, the task's problem rather than dsec's.
func (s *Server) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		s.log.DebugContext(r.Context(), "proxy: client went away", "err", err)
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	var (
		ce *errdefs.Error
		ae *api.Error
	)
	if errors.As(err, &ce) || errors.As(err, &ae) {
		s.writeError(w, r, err)
		return
	}
	t, _ := r.Context().Value(proxyTargetKey{}).(proxyTarget)
	s.writeError(w, r, api.NewError(api.CodeBadGateway, "proxy to port %d of sandbox %s: %v", t.port, t.id, err))
}
