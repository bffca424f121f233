package noderpc_test

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/dsec-dev/dsec/internal/cluster/noderpc"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// With TLS on both sides the same calls and streams work over HTTP/2 + TLS.
func TestTLS(t *testing.T) {
	// httptest's certificate (valid for 127.0.0.1) stands in for a cluster's.
	ts := httptest.NewUnstartedServer(nil)
	ts.StartTLS()
	cert, roots := ts.TLS.Certificates[0], x509.NewCertPool()
	roots.AddCert(ts.Certificate())
	ts.Close()

	m := mockAgent(t)
	path, h := noderpc.NewHandler(m, noderpc.HandlerOptions{Secret: secret})
	mux := http.NewServeMux()
	mux.Handle(path, h)
	srv := noderpc.NewServer(mux, noderpc.ServerOptions{TLS: &tls.Config{Certificates: []tls.Certificate{cert}}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.ServeTLS(ln, "", "")
	defer srv.Close()
	c := noderpc.NewClient("https://"+ln.Addr().String(), noderpc.ClientOptions{Secret: secret, TLS: &tls.Config{RootCAs: roots}})
	defer c.Close()
	ctx := ctxT(t)
	sb, err := c.Create(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	res, err := c.ExecStream(ctx, sb.ID, api.ExecRequest{Cmd: []string{"cat"}}, session.Stream{Stdin: strings.NewReader("over tls"), Stdout: &out})
	if err != nil || res.ExitCode != 0 || out.String() != "over tls" {
		t.Errorf("ExecStream over TLS: %+v, %v, %q", res, err, out.String())
	}
	// A client that does not trust the node's certificate gets unavailable.
	bad := noderpc.NewClient("https://"+ln.Addr().String(), noderpc.ClientOptions{Secret: secret, TLS: &tls.Config{}})
	defer bad.Close()
	_, err = bad.Get(ctx, sb.ID)
	transportErr(t, "Get with an untrusted certificate", err)
}

// Many streams and calls at once on one client share its connection without
// mixing up their output.
func TestConcurrentStreams(t *testing.T) {
	m := mockAgent(t)
	c := serve(t, m, noderpc.HandlerOptions{}).client(t, nil)
	ctx := ctxT(t)
	sb, err := c.Create(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := strings.Repeat(string(rune('a'+i%26)), 100_000+i)
			var out strings.Builder
			// "sleep" keeps the process alive while its output is copied: the
			// drivers give a finished process's output only procio.DrainGrace
			// (100 ms), which a loaded machine under -race can miss (a
			// driver matter, not the wire's).
			res, err := c.ExecStream(ctx, sb.ID, api.ExecRequest{Shell: "cat && sleep 0.2"},
				session.Stream{Stdin: strings.NewReader(want), Stdout: &out})
			if err != nil || res.ExitCode != 0 || out.String() != want {
				t.Errorf("stream %d: %+v, %v, %d bytes back of %d", i, res, err, out.Len(), len(want))
			}
			if _, err := c.Get(ctx, sb.ID); err != nil {
				t.Errorf("Get %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
}
