package netpolicy_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/dsec-dev/dsec/internal/netpolicy"
	"github.com/dsec-dev/dsec/internal/netpolicy/netpolicytest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// hostCheckWorld is a node (its host check off with noCheck), a resolver,
// and two web servers: pypi.org's address, which evil.org (a denied name)
// resolves to as well, as two names on one CDN address would, and
// files.example.com's. Its sandbox, allowed pypi.org and *.example.com, has
// resolved both allowed names.
func hostCheckWorld(t *testing.T, first int, noCheck bool) (w *world, ns *os.File, pypi, files *netpolicytest.Host) {
	t.Helper()
	dns := fmt.Sprintf("198.18.%d.2:53", first)
	w = newWorldWith(t, first, 3, netpolicy.Config{DNS: dns, NoHostCheck: noCheck})
	resolver, pypi, files := w.hosts[0], w.hosts[1], w.hosts[2]
	netpolicytest.DNSServer(t, resolver.NS, dns, 60, map[string]netip.Addr{
		"pypi.org": pypi.Addr, "evil.org": pypi.Addr, "files.example.com": files.Addr})
	pypi.WebServer(t)
	files.WebServer(t)
	ns = w.sandbox("sb-hck", api.NetworkPolicy{AllowDomains: []string{"pypi.org", "*.example.com"}, DenyDomains: []string{"evil.org"}})
	for name, want := range map[string]netip.Addr{"pypi.org": pypi.Addr, "files.example.com": files.Addr} {
		if got, rc, err := netpolicytest.Lookup(ns, "203.0.113.53:53", name, false); err != nil || rc != dnsmessage.RCodeSuccess || !slices.Equal(got, []netip.Addr{want}) {
			t.Fatalf("lookup %s: %v %v %v", name, got, rc, err)
		}
	}
	return w, ns, pypi, files
}

// TestHostCheck: flows to ports 80 and 443 that a domain rule admits get
// through only if their TLS SNI or HTTP Host is an allowed name that the
// address they go to was learned for; the server does the TLS handshake
// itself (no termination). A sandbox that connects to pypi.org's address
// asking for evil.org, a denied name served from the same address, is
// reset (and counted as denied); with the check off it gets through.
func TestHostCheck(t *testing.T) {
	w, ns, pypi, files := hostCheckWorld(t, 81, false)
	at := func(h *netpolicytest.Host, port int) string { return fmt.Sprintf("%s:%d", h.Addr, port) }

	for _, c := range []struct{ url, addr, want string }{
		{"https://pypi.org/", at(pypi, 443), "host=pypi.org sni=pypi.org\n"},
		{"http://pypi.org/", at(pypi, 80), "host=pypi.org sni=\n"},
		{"https://files.example.com/x", at(files, 443), "host=files.example.com sni=files.example.com\n"},
		{"http://PyPI.org./", at(pypi, 80), "host=PyPI.org. sni=\n"},
	} {
		got, err := netpolicytest.Fetch(netpolicytest.WebClient(ns, c.addr), c.url)
		if err != nil || got != c.want {
			t.Errorf("%s at %s: %q %v, want %q", c.url, c.addr, got, err, c.want)
		}
	}
	before := w.denied("sb-hck")
	refusals := []struct{ why, url, addr string }{
		{"denied name on an allowed name's address (TLS)", "https://evil.org/", at(pypi, 443)},
		{"denied name on an allowed name's address (HTTP)", "http://evil.org/", at(pypi, 80)},
		{"name not in the rules", "https://unknown.net/", at(pypi, 443)},
		{"allowed name, address learned for another name (TLS)", "https://files.example.com/", at(pypi, 443)},
		{"allowed name, address learned for another name (HTTP)", "http://pypi.org/", at(files, 80)},
		{"TLS without SNI", "https://" + at(pypi, 443) + "/", at(pypi, 443)},
	}
	for _, c := range refusals {
		got, err := netpolicytest.Fetch(netpolicytest.WebClient(ns, c.addr), c.url)
		if err == nil {
			t.Errorf("%s: %s at %s answered %q, want a reset", c.why, c.url, c.addr, got)
		} else if !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%s: %s at %s: %v, want a reset", c.why, c.url, c.addr, err)
		}
	}
	if n := w.denied("sb-hck") - before; n != uint64(len(refusals)) {
		t.Errorf("denied counter grew by %d, want %d (one per reset flow)", n, len(refusals))
	}
	// On a kept-alive HTTP connection every request is checked: a second
	// request for the allowed name is answered, one for a denied name on the
	// same connection resets it.
	before = w.denied("sb-hck")
	kc, err := netpolicytest.Dial(ns, at(pypi, 80), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	_ = kc.SetDeadline(time.Now().Add(10 * time.Second))
	kr := bufio.NewReader(kc)
	ask := func(host string) (string, error) {
		if _, err := fmt.Fprintf(kc, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", host); err != nil {
			return "", err
		}
		res, err := http.ReadResponse(kr, nil)
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return string(b), err
	}
	for _, host := range []string{"pypi.org", "pypi.org"} {
		if got, err := ask(host); err != nil || got != "host=pypi.org sni=\n" {
			t.Fatalf("kept-alive request for %s: %q %v", host, got, err)
		}
	}
	if got, err := ask("evil.org"); err == nil {
		t.Errorf("a later request for evil.org on a kept-alive connection to pypi.org's address answered %q, want a reset", got)
	}
	// An upgrade the server does not grant (an answer other than 101) leaves
	// the connection HTTP, and its later requests checked.
	uc, err := netpolicytest.Dial(ns, at(pypi, 80), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	_ = uc.SetDeadline(time.Now().Add(10 * time.Second))
	ur := bufio.NewReader(uc)
	for i, host := range []string{"pypi.org", "evil.org"} {
		hdr := ""
		if i == 0 {
			hdr = "Upgrade: websocket\r\nConnection: Upgrade\r\n"
		}
		if _, err := fmt.Fprintf(uc, "GET / HTTP/1.1\r\nHost: %s\r\n%s\r\n", host, hdr); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(ur, nil)
		if i == 0 {
			if err != nil || res.StatusCode != http.StatusOK {
				t.Fatalf("an upgrade request the server does not grant: %v %v", res, err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		} else if err == nil {
			t.Errorf("evil.org after an ungranted upgrade answered %s, want a reset", res.Status)
		}
	}
	if n := w.denied("sb-hck") - before; n != 2 {
		t.Errorf("denied counter grew by %d for the later requests, want 2", n)
	}
	// A policy whose address entries admit the address too lets any name
	// through (the check narrows domain rules, not address rules).
	both := w.sandbox("sb-both", api.NetworkPolicy{Allow: []string{"0.0.0.0/0"}, AllowDomains: []string{"pypi.org"}})
	if _, _, err := netpolicytest.Lookup(both, "203.0.113.53:53", "pypi.org", false); err != nil {
		t.Fatal(err)
	}
	if got, err := netpolicytest.Fetch(netpolicytest.WebClient(both, at(pypi, 443)), "https://evil.org/"); err != nil || !strings.Contains(got, "sni=evil.org") {
		t.Errorf("internet access and a domain rule: evil.org on pypi.org's address: %q %v, want through", got, err)
	}
	// Other ports of a learned address are admitted by address alone.
	w.mustReach(ns, pypi.Listen(t, 0))

	// A new agent process (the old one gone, the kernel's objects kept):
	// the check runs on the new one's port once the sandbox resolved again.
	if err := w.m.Close(); err != nil {
		t.Fatal(err)
	}
	w.m = w.open(netpolicy.RuleSets{})
	if _, _, err := netpolicytest.Lookup(ns, "203.0.113.53:53", "pypi.org", true); err != nil {
		t.Fatal(err)
	}
	if got, err := netpolicytest.Fetch(netpolicytest.WebClient(ns, at(pypi, 443)), "https://pypi.org/"); err != nil || !strings.Contains(got, "sni=pypi.org") {
		t.Fatalf("after a restart: %q %v", got, err)
	}
	if got, err := netpolicytest.Fetch(netpolicytest.WebClient(ns, at(pypi, 443)), "https://evil.org/"); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("after a restart, evil.org on pypi.org's address: %q %v, want a reset", got, err)
	}

	t.Run("off", func(t *testing.T) {
		_, ns, pypi, _ := hostCheckWorld(t, 84, true)
		got, err := netpolicytest.Fetch(netpolicytest.WebClient(ns, at(pypi, 443)), "https://evil.org/")
		if err != nil || !strings.Contains(got, "sni=evil.org") {
			t.Fatalf("check off: evil.org on pypi.org's address: %q %v, want through", got, err)
		}
	})
}
