package e2b_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/frontend/e2b"
)

// portEnv is the E2B front end over a real node agent (the mock driver,
// whose sandbox ports are the host's loopback ports) behind an HTTP server,
// with a sandbox made through E2B's create.
type portEnv struct {
	t       *testing.T
	srv     *httptest.Server
	id      string
	domain  string
	token   string
	traffic *string // create's trafficAccessToken
}

func newPortEnv(t *testing.T, network ...string) *portEnv {
	t.Helper()
	h := e2b.New(agenttest.New(t, agenttest.Options{}), e2b.Options{Authorize: func(k string) bool { return k == testKey }, Secret: []byte("test")})
	srv := httptest.NewUnstartedServer(e2b.Mount(http.NotFoundHandler(), h))
	// A handler panic net/http recovers from is a failure too.
	srv.Config.ErrorLog = log.New(panicLog{t}, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	h.SetListenAddr(srv.Listener.Addr().String())
	req, _ := http.NewRequest("POST", srv.URL+"/v2/sandboxes", strings.NewReader(`{"templateID":"tiny","timeout":60`+strings.Join(network, "")+`}`))
	req.Header.Set("X-API-Key", "e2b_"+testKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var sb struct {
		SandboxID       string  `json:"sandboxID"`
		Domain          *string `json:"domain"`
		EnvdAccessToken string  `json:"envdAccessToken"`
		Traffic         *string `json:"trafficAccessToken"`
	}
	if err := json.NewDecoder(res.Body).Decode(&sb); err != nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %v", res.StatusCode, err)
	}
	if sb.Domain == nil {
		t.Fatal("create answered no domain: the SDK's getHost would name e2b.app")
	}
	return &portEnv{t: t, srv: srv, id: sb.SandboxID, domain: *sb.Domain, token: sb.EnvdAccessToken, traffic: sb.Traffic}
}

// panicLog fails the test on a panic the HTTP server logs.
type panicLog struct{ t *testing.T }

func (p panicLog) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte("panic")) {
		p.t.Errorf("the server recovered from a panic: %s", b)
	}
	return len(b), nil
}

// host is what the SDK's getHost(port) gives.
func (e *portEnv) host(port int) string { return fmt.Sprintf("%d-%s.%s", port, e.id, e.domain) }

// get sends GET path to dsec's listener with the given Host and headers.
func (e *portEnv) get(host, path string, hdr ...string) (*http.Response, string) {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.srv.URL+path, nil)
	req.Host = host
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// appPort starts the "sandbox application": an HTTP server on a loopback
// port (the mock sandbox's own) that echoes what it received.
func appPort(t *testing.T) int {
	t.Helper()
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "path=%s host=%s token=%q sandbox=%q", r.URL.RequestURI(), r.Host,
			r.Header.Get("X-Access-Token")+r.Header.Get(e2b.TrafficTokenHeader), r.Header.Get(e2b.SandboxIDHeader))
	}))
	t.Cleanup(app.Close)
	return app.Listener.Addr().(*net.TCPAddr).Port
}

// freePort is a loopback port nothing listens on.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

// TestSandboxPorts reaches a port inside a sandbox the two ways E2B's SDKs
// do: by the host getHost(port) builds from create's domain, and by the
// E2b-Sandbox-Id/E2b-Sandbox-Port headers; dsec's own credentials are not
// passed on, the host is.
func TestSandboxPorts(t *testing.T) {
	e := newPortEnv(t)
	_, lport, _ := net.SplitHostPort(e.srv.Listener.Addr().String())
	if e.domain != "localhost:"+lport {
		t.Fatalf("domain %q, want localhost:%s (the listener)", e.domain, lport)
	}
	if e.traffic != nil {
		t.Errorf("a sandbox with public ports has a traffic token %q", *e.traffic)
	}
	port := appPort(t)

	res, body := e.get(e.host(port), "/a/b?q=1", "X-Access-Token", e.token)
	want := fmt.Sprintf("path=/a/b?q=1 host=%s token=\"\" sandbox=\"\"", e.host(port))
	if res.StatusCode != http.StatusOK || body != want {
		t.Errorf("by host: %d %q, want 200 %q", res.StatusCode, body, want)
	}

	res, body = e.get("localhost:"+lport, "/x", e2b.SandboxIDHeader, e.id, e2b.SandboxPortHeader, strconv.Itoa(port))
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(body, "path=/x ") {
		t.Errorf("by headers: %d %q, want the application's answer", res.StatusCode, body)
	}

	// envd's port by its host is dsec's envd (its /health answers 204, the
	// control plane's 200).
	res, _ = e.get(e.host(e2b.EnvdPort), "/health", "X-Access-Token", e.token)
	if res.StatusCode != http.StatusNoContent {
		t.Errorf("envd's /health by host: %d, want 204", res.StatusCode)
	}
}

// TestSandboxPortErrors: nothing listening gives E2B's proxy answer (502
// JSON with the sandbox and port; an HTML page for browsers), an unknown
// sandbox its "not found" answer, a port out of range a 400.
func TestSandboxPortErrors(t *testing.T) {
	e := newPortEnv(t)
	closed := freePort(t)
	res, body := e.get(e.host(closed), "/")
	var pc struct {
		SandboxID string `json:"sandboxId"`
		Message   string `json:"message"`
		Port      int    `json:"port"`
		Code      int    `json:"code"`
	}
	if err := json.Unmarshal([]byte(body), &pc); err != nil || res.StatusCode != http.StatusBadGateway ||
		pc.SandboxID != e.id || pc.Port != closed || pc.Code != 502 || pc.Message != "The sandbox is running but port is not open" {
		t.Errorf("closed port: %d %s", res.StatusCode, body)
	}
	res, body = e.get(e.host(closed), "/", "User-Agent", "Mozilla/5.0 (X11; Linux x86_64)")
	if res.StatusCode != http.StatusBadGateway || !strings.Contains(body, "<title>Closed Port Error</title>") {
		t.Errorf("closed port in a browser: %d %s", res.StatusCode, body)
	}

	res, body = e.get(fmt.Sprintf("%d-sb-00000000000000aa.mock-node.%s", closed, e.domain), "/")
	if res.StatusCode != http.StatusBadGateway || !strings.Contains(body, `"message":"The sandbox was not found"`) {
		t.Errorf("unknown sandbox: %d %s", res.StatusCode, body)
	}

	res, body = e.get(fmt.Sprintf("70000-%s.%s", e.id, e.domain), "/")
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(body, "1..65535") {
		t.Errorf("port out of range: %d %s", res.StatusCode, body)
	}
	res, body = e.get("localhost", "/", e2b.SandboxIDHeader, e.id, e2b.SandboxPortHeader, "0")
	if res.StatusCode != http.StatusBadRequest {
		t.Errorf("port 0 by header: %d %s", res.StatusCode, body)
	}
}

// TestSandboxPortUpgrade carries a WebSocket-style upgrade through to the
// sandbox port and bytes both ways after it.
func TestSandboxPortUpgrade(t *testing.T) {
	e := newPortEnv(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() { // an echo server that switches protocols
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil || !strings.EqualFold(req.Header.Get("Upgrade"), "websocket") {
					return
				}
				io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
				io.Copy(c, br)
			}()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port

	c, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", e.host(port))
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", res, err)
	}
	io.WriteString(c, "ping\n")
	line, err := br.ReadString('\n')
	if err != nil || line != "ping\n" {
		t.Fatalf("echo after the upgrade: %q %v", line, err)
	}
}

// TestSandboxPortsPrivate: with network.allowPublicTraffic false, create
// hands out a traffic access token and a port answers only requests that
// carry it (403 otherwise), as on E2B; the token is not passed on.
func TestSandboxPortsPrivate(t *testing.T) {
	e := newPortEnv(t, `,"network":{"allowPublicTraffic":false}`)
	if e.traffic == nil || *e.traffic == "" {
		t.Fatal("no trafficAccessToken for a sandbox with private ports")
	}
	port := appPort(t)
	for _, tok := range []string{"", "wrong", e.token} {
		if res, body := e.get(e.host(port), "/", e2b.TrafficTokenHeader, tok); res.StatusCode != http.StatusForbidden {
			t.Errorf("token %q: %d %s, want 403", tok, res.StatusCode, body)
		}
	}
	res, body := e.get(e.host(port), "/", e2b.TrafficTokenHeader, *e.traffic)
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `token=""`) {
		t.Errorf("with the traffic token: %d %s", res.StatusCode, body)
	}
}

// TestDomainFlag: the default domain is localhost with the listener's port;
// a configured one is checked and answered as it is, and hosts under it
// reach ports whatever port a proxy in front put after it.
func TestDomainFlag(t *testing.T) {
	for addr, want := range map[string]string{"127.0.0.1:7070": "localhost:7070", "[::]:80": "localhost:80", "0.0.0.0:0": "localhost", "bad": "localhost"} {
		if got := e2b.DomainFor(addr); got != want {
			t.Errorf("DomainFor(%q) = %q, want %q", addr, got, want)
		}
	}
	for _, d := range []string{"sandbox.example.com", "e2b.lab.internal:8443", "localhost"} {
		if err := e2b.CheckDomain(d); err != nil {
			t.Errorf("CheckDomain(%q): %v", d, err)
		}
	}
	for _, d := range []string{"", "a..b", "-a.com", "a.com:0", "a.com:99999", "a_b.com", "https://a.com", "a.com/x"} {
		if err := e2b.CheckDomain(d); err == nil {
			t.Errorf("CheckDomain(%q) accepted", d)
		}
	}

	h := e2b.New(agenttest.New(t, agenttest.Options{}), e2b.Options{Authorize: func(k string) bool { return k == testKey },
		Secret: []byte("test"), Domain: "Sandbox.Example.com:8443"})
	h.SetListenAddr("127.0.0.1:7070") // a configured domain stays
	if h.Domain() != "Sandbox.Example.com:8443" {
		t.Fatalf("domain %q", h.Domain())
	}
	for host, owned := range map[string]bool{
		"8000-sb-0123456789abcdef.mock-node.sandbox.example.com":     true,
		"8000-sb-0123456789abcdef.mock-node.SANDBOX.example.com:443": true,
		"8000-sb-0123456789abcdef.mock-node.example.com":             false,
		"sandbox.example.com":        false,
		"x-sb-1.sandbox.example.com": false,
	} {
		r := httptest.NewRequest("GET", "/v1/anything", nil)
		r.Host = host
		if got := h.Owns(r); got != owned {
			t.Errorf("Owns(host %q) = %v, want %v", host, got, owned)
		}
	}
}

// TestSandboxPortsHostMask: with network.maskRequestHost the sandbox's
// service sees the mask as Host (${PORT} replaced by its port), whether the
// request named the port by host or by headers; getInfo reports the mask; a
// malformed mask is a 400 and creates nothing.
func TestSandboxPortsHostMask(t *testing.T) {
	e := newPortEnv(t, `,"network":{"maskRequestHost":"custom-host.example.com:${PORT}"}`)
	port := appPort(t)
	want := fmt.Sprintf("host=custom-host.example.com:%d ", port)
	if res, body := e.get(e.host(port), "/m"); res.StatusCode != http.StatusOK || !strings.Contains(body, want) {
		t.Errorf("by host: %d %q, want %q", res.StatusCode, body, want)
	}
	_, lport, _ := net.SplitHostPort(e.srv.Listener.Addr().String())
	res, body := e.get("localhost:"+lport, "/m", e2b.SandboxIDHeader, e.id, e2b.SandboxPortHeader, strconv.Itoa(port))
	if res.StatusCode != http.StatusOK || !strings.Contains(body, want) {
		t.Errorf("by headers: %d %q, want %q", res.StatusCode, body, want)
	}
	res, body = e.get("localhost:"+lport, "/sandboxes/"+e.id, "X-API-Key", "e2b_"+testKey)
	var info struct {
		Network *struct {
			MaskRequestHost string `json:"maskRequestHost"`
		} `json:"network"`
	}
	if err := json.Unmarshal([]byte(body), &info); err != nil || res.StatusCode != http.StatusOK ||
		info.Network == nil || info.Network.MaskRequestHost != "custom-host.example.com:${PORT}" {
		t.Errorf("getInfo: %d %s, want network.maskRequestHost", res.StatusCode, body)
	}

	// Without a mask the client's host goes through (TestSandboxPorts); a
	// malformed mask is refused before anything is made.
	for _, bad := range []string{"a b.com", "x.com/${PORT}", "x.com:${PORT}${PORT}", "https://x.com"} {
		req, _ := http.NewRequest("POST", e.srv.URL+"/v2/sandboxes",
			strings.NewReader(fmt.Sprintf(`{"templateID":"tiny","network":{"maskRequestHost":%q}}`, bad)))
		req.Header.Set("X-API-Key", "e2b_"+testKey)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "maskRequestHost") {
			t.Errorf("mask %q: %d %s, want a 400 naming maskRequestHost", bad, res.StatusCode, b)
		}
	}
	res, body = e.get("localhost:"+lport, "/v2/sandboxes", "X-API-Key", "e2b_"+testKey)
	if n := strings.Count(body, `"sandboxID"`); res.StatusCode != http.StatusOK || n != 1 {
		t.Errorf("sandboxes after refused creates: %d, %d listed, want 1: %s", res.StatusCode, n, body)
	}
}

// TestSandboxPortEarlyAnswer: a sandbox service that answers before reading
// the request body (as the code interpreter streams its results) gets the
// proxied requests of a kept-alive client one after another, and the server
// never trips over the unread body (net/http's "invalid concurrent
// Body.Read call" panic, golang/go#68560, with full duplex).
func TestSandboxPortEarlyAnswer(t *testing.T) {
	e := newPortEnv(t)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "early")
	}))
	t.Cleanup(app.Close)
	port := app.Listener.Addr().(*net.TCPAddr).Port
	body := bytes.Repeat([]byte("x"), 1<<20)
	for i := 0; i < 200; i++ {
		req, _ := http.NewRequest("POST", e.srv.URL+"/upload", bytes.NewReader(body))
		req.Host = e.host(port)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			continue // the proxy may drop a connection whose body it did not take
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || string(b) != "early" {
			t.Fatalf("request %d: %d %q, want 200 \"early\"", i, res.StatusCode, b)
		}
	}
}
