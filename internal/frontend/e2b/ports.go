package e2b

import (
	"context"
	"crypto/subtle"
	"fmt"
	"html"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/e2bapi"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Sandbox ports as E2B's proxy serves them. A request reaches port P of
// sandbox S either by its host, "P-S.DOMAIN" (what the SDK's getHost(P)
// builds from the domain create answers with), or by the headers
// E2b-Sandbox-Id: S and E2b-Sandbox-Port: P (what the SDKs send when
// E2B_SANDBOX_URL points at one address). Port EnvdPort is dsec's envd
// handler; any other port is proxied into the sandbox through
// session.Service.Dial, plain HTTP and upgrades (WebSocket) alike. As on
// E2B, sandbox ports are public unless create said network.allowPublicTraffic
// false: then a request carries the sandbox's traffic access token (create's
// trafficAccessToken) in E2b-Traffic-Access-Token. A sandbox created with
// network.maskRequestHost sees that Host (its ${PORT} replaced by the port)
// instead of the one the client asked for.

// EnvdPort is the port E2B's SDKs address envd on.
const EnvdPort = 49983

// portTarget is the sandbox port a request names.
type portTarget struct {
	id   string
	port int
	mask string // the sandbox's network.maskRequestHost ("": none)
}

// labelHostMask keeps create's network.maskRequestHost on the sandbox.
const labelHostMask = labelPrefix + "mask-request-host"

// maskPortVar is the placeholder in a host mask that stands for the port.
const maskPortVar = "${PORT}"

// checkHostMask says why mask cannot be a network.maskRequestHost
// (invalid_argument), or nil: with ${PORT} replaced by a port it must be a
// host name or address with an optional :PORT, as CheckDomain has it, so
// the Host header it makes is well formed. "" is no mask.
func checkHostMask(mask string) error {
	if mask == "" {
		return nil
	}
	if len(mask) > 253 || CheckDomain(strings.ReplaceAll(mask, maskPortVar, "65535")) != nil {
		return errdefs.Invalid("network.maskRequestHost %q: want a host name, optionally with :PORT; %s stands for the sandbox port", mask, maskPortVar)
	}
	return nil
}

// maskedHost is the Host a request to port shows with mask applied.
func maskedHost(mask string, port int) string {
	return strings.ReplaceAll(mask, maskPortVar, strconv.Itoa(port))
}

// networkInfo is the part of E2B's network config that sb reports back
// (nil: nothing to report): its host mask and, when off, public traffic.
func networkInfo(sb api.Sandbox) *e2bapi.SandboxNetworkConfig {
	mask, private := sb.Labels[labelHostMask], privatePorts(sb)
	if mask == "" && !private {
		return nil
	}
	n := &e2bapi.SandboxNetworkConfig{}
	if mask != "" {
		n.MaskRequestHost = &mask
	}
	if private {
		public := false
		n.AllowPublicTraffic = &public
	}
	return n
}

type portTargetKey struct{}

// CheckDomain says why d cannot be the sandbox domain (invalid_argument), or
// nil: a DNS name of letters, digits, '-' and dots, optionally with ":PORT".
func CheckDomain(d string) error {
	host, port, hasPort := strings.Cut(d, ":")
	if hasPort {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return errdefs.Invalid("e2b domain %q: port must be 1..65535", d)
		}
	}
	if host == "" || len(host) > 253 {
		return errdefs.Invalid("e2b domain %q: want a DNS name, optionally with :PORT", d)
	}
	for _, label := range strings.Split(host, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' ||
			strings.TrimLeft(strings.ToLower(label), "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
			return errdefs.Invalid("e2b domain %q: %q is not a DNS label", d, label)
		}
	}
	return nil
}

// DomainFor is the default sandbox domain of a listener on addr:
// "localhost:PORT". Names under localhost resolve to the loopback address
// (RFC 6761), so a host getHost builds from it reaches this listener from
// the same machine and never leaves it; a deployment reached from elsewhere
// configures its own domain (wildcard DNS to dsec).
func DomainFor(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" || port == "0" {
		return "localhost"
	}
	return "localhost:" + port
}

// SetListenAddr gives the handler the address its listener serves on, from
// which it derives the sandbox domain unless Options.Domain set one.
func (h *Handler) SetListenAddr(addr string) {
	if h.opts.Domain == "" {
		d := DomainFor(addr)
		h.domain.Store(&d)
	}
}

// Domain is the sandbox domain create and connect answer with.
func (h *Handler) Domain() string { return *h.domain.Load() }

// hostTarget parses a host of the form "PORT-SANDBOXID.DOMAIN" (any port
// after the domain's name is ignored: a proxy in front may change it).
// matched says the host has that form; err says its port is unusable.
func (h *Handler) hostTarget(host string) (t portTarget, matched bool, err error) {
	name := host
	if hn, _, err := net.SplitHostPort(host); err == nil {
		name = hn
	}
	domain := h.Domain()
	if dn, _, ok := strings.Cut(domain, ":"); ok {
		domain = dn
	}
	rest, ok := strings.CutSuffix(strings.ToLower(name), "."+strings.ToLower(domain))
	if !ok {
		return t, false, nil
	}
	port, id, ok := strings.Cut(rest, "-")
	if !ok || id == "" || port == "" || strings.TrimLeft(port, "0123456789") != "" {
		return t, false, nil
	}
	t = portTarget{id: id}
	t.port, err = parsePort(port)
	return t, true, err
}

func parsePort(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, errdefs.Invalid("sandbox port %q: want 1..65535", s)
	}
	return n, nil
}

// portOf returns the sandbox port r names (by host or by headers), if any.
func (h *Handler) portOf(r *http.Request) (t portTarget, ok bool, err error) {
	if t, ok, err = h.hostTarget(r.Host); ok {
		return t, ok, err
	}
	id, port := r.Header.Get(SandboxIDHeader), r.Header.Get(SandboxPortHeader)
	if id == "" || port == "" {
		return t, false, nil
	}
	t = portTarget{id: id}
	t.port, err = parsePort(port)
	return t, true, err
}

// newPortProxy returns the reverse proxy to sandbox ports: its transport
// dials the port named by the outgoing URL's host (session.ProxyHost)
// through the session service.
func (h *Handler) newPortProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Transport: &http.Transport{
			Proxy: nil, // never through an environment proxy
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
				return session.DialProxyAddr(ctx, h.svc, addr)
			},
			MaxIdleConnsPerHost:   16,
			IdleConnTimeout:       30 * time.Second,
			ExpectContinueTimeout: time.Second,
			DisableCompression:    true,
		},
		Rewrite: func(pr *httputil.ProxyRequest) {
			t, _ := pr.In.Context().Value(portTargetKey{}).(portTarget)
			pr.Out.URL = &url.URL{Scheme: "http", Host: session.ProxyHost(t.id, t.port),
				Path: pr.In.URL.Path, RawPath: pr.In.URL.RawPath, RawQuery: pr.In.URL.RawQuery}
			pr.Out.Host = pr.In.Host // E2B's proxy keeps the host the client asked for
			if t.mask != "" {
				pr.Out.Host = maskedHost(t.mask, t.port)
			}
			for _, k := range []string{SandboxIDHeader, SandboxPortHeader, AccessTokenHeader, APIKeyHeader, TrafficTokenHeader,
				api.TrajectoryHeader, api.StepHeader} {
				pr.Out.Header.Del(k)
			}
			pr.SetXForwarded()
		},
		ErrorHandler: h.portError,
		ErrorLog:     nil,
	}
}

// servePort proxies r to the sandbox port t.
func (h *Handler) servePort(w http.ResponseWriter, r *http.Request, t portTarget) {
	if tagged(r.Context()) {
		h.writeAPIError(w, r, http.StatusNotImplemented,
			"trajectory steps through sandbox ports are not supported by the E2B front end; use /v1/sandboxes/{id}/http/{port}/")
		return
	}
	sb, ok := h.running(r.Context(), t.id)
	if !ok {
		writeSandboxGone(w, t.id)
		return
	}
	if privatePorts(sb) && subtle.ConstantTimeCompare([]byte(r.Header.Get(TrafficTokenHeader)), []byte(h.trafficToken(sb.ID))) != 1 {
		writeJSON(w, http.StatusForbidden, proxyErrorBody{SandboxID: t.id, Code: http.StatusForbidden,
			Message: "the sandbox's ports are private: send its traffic access token in the " + TrafficTokenHeader + " header"})
		return
	}
	// The sandbox's service may answer (and stream) before it has read the
	// whole request body, as E2B's code interpreter does: without full duplex
	// the HTTP/1 server closes the body once the answer starts, and the
	// proxy's write of the rest of it fails and drops the connection.
	// The body is closed before the handler returns: a full-duplex body
	// left unread races the server's read of the connection's next request
	// ("invalid concurrent Body.Read call", golang/go#68560).
	defer r.Body.Close()
	_ = http.NewResponseController(w).EnableFullDuplex()
	t.mask = sb.Labels[labelHostMask]
	h.ports.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), portTargetKey{}, t)))
}

// portError answers a proxied request that found no sandbox or nothing
// listening, as E2B's proxy does: 502 with a JSON body (an HTML page for
// browsers).
func (h *Handler) portError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		w.WriteHeader(http.StatusBadGateway) // the client went away
		return
	}
	t, _ := r.Context().Value(portTargetKey{}).(portTarget)
	switch errdefs.CodeOf(err) {
	case api.CodeNotFound, api.CodeConflict, api.CodeUnavailable:
		writeSandboxGone(w, t.id)
		return
	}
	h.log.DebugContext(r.Context(), "e2b port proxy", "sandbox", t.id, "port", t.port, "err", err)
	writePortClosed(w, r, t)
}

// portClosedBody is E2B's proxy answer for a port nothing listens on.
type portClosedBody struct {
	SandboxID string `json:"sandboxId"`
	Message   string `json:"message"`
	Port      int    `json:"port"`
	Code      int    `json:"code"`
}

const portClosedMessage = "The sandbox is running but port is not open"

func writePortClosed(w http.ResponseWriter, r *http.Request, t portTarget) {
	if !strings.Contains(r.Header.Get("User-Agent"), "Mozilla/") {
		writeJSON(w, http.StatusBadGateway, portClosedBody{SandboxID: t.id, Message: portClosedMessage, Port: t.port, Code: http.StatusBadGateway})
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusBadGateway)
	fmt.Fprintf(w, "<!DOCTYPE html>\n<html><head><title>Closed Port Error</title></head>\n<body><h1>Closed Port Error</h1>\n"+
		"<p>The sandbox %s is running but there is no service running on port %d.</p></body></html>\n",
		html.EscapeString(t.id), t.port)
}
