package netpolicytest

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"
)

// WebServer serves HTTP on port 80 and HTTPS (with a test certificate) on
// port 443 of the host, answering every request with "host=HOST sni=NAME\n":
// the request's Host and the server name its TLS client asked for (empty
// over HTTP or without SNI). It stops when t ends.
func (h *Host) WebServer(t testing.TB) {
	t.Helper()
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sni := ""
		if r.TLS != nil {
			sni = r.TLS.ServerName
		}
		fmt.Fprintf(w, "host=%s sni=%s\n", r.Host, sni)
	})
	for _, port := range []int{80, 443} {
		var ln net.Listener
		if err := In(h.NS, func() error {
			var err error
			ln, err = net.Listen("tcp4", net.JoinHostPort(h.Addr.String(), fmt.Sprint(port)))
			return err
		}); err != nil {
			t.Fatalf("web server %s:%d: %v", h.Addr, port, err)
		}
		srv := httptest.NewUnstartedServer(handler)
		srv.Listener.Close()
		srv.Listener = ln
		if port == 443 {
			srv.StartTLS()
		} else {
			srv.Start()
		}
		t.Cleanup(srv.Close)
	}
}

// WebClient is an HTTP client for inside ns that connects to addr
// (ADDR:PORT) whatever the URL's host (as curl --resolve does), opens a new
// connection per request and does not check certificates (test servers
// have test certificates; what matters is which name is asked for).
func WebClient(ns *os.File, addr string) *http.Client {
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return Dial(ns, addr, 2*time.Second)
			},
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
			DisableKeepAlives: true,
		},
	}
}

// Fetch GETs url with c and returns the body.
func Fetch(c *http.Client, url string) (string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", url, resp.Status)
	}
	return string(b), err
}
