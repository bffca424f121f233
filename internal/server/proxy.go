package server

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/trajectory"
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

const proxyHostSuffix = ".sandbox"

func newSandboxProxy(svc session.Service, log *slog.Logger, onError func(http.ResponseWriter, *http.Request, error)) *sandboxProxy {
	transport := &http.Transport{
		Proxy: nil, // never route sandbox traffic through an environment proxy
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, portStr, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, fmt.Errorf("proxy address %q: %w", addr, err)
			}
			id, err := hex.DecodeString(strings.TrimSuffix(host, proxyHostSuffix))
			if err != nil {
				return nil, fmt.Errorf("proxy address %q: %w", addr, err)
			}
			port, err := strconv.Atoi(portStr)
			if err != nil {
				return nil, fmt.Errorf("proxy address %q: %w", addr, err)
			}
			return svc.Dial(ctx, string(id), port)
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
				Host:     net.JoinHostPort(hex.EncodeToString([]byte(t.id))+proxyHostSuffix, strconv.Itoa(t.port)),
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
	ctx := context.WithValue(r.Context(), proxyTargetKey{}, proxyTarget{id: id, port: port, path: rest})
	r = r.WithContext(ctx)
	tag, tagged, err := stepTagOf(r)
	switch {
	case err != nil:
		s.writeError(w, r, err)
	case tagged:
		s.runStep(w, r, trajectory.OpHTTP, tag, id, s.prepareHTTP(port, rest), s.proxy.rp.ServeHTTP)
	default:
		s.proxy.rp.ServeHTTP(w, r)
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
