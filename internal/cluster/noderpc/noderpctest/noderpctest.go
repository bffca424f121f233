// Package noderpctest serves a Node RPC handler on loopback for tests.
// Production code must not import it.
package noderpctest

import (
	"net"
	"net/http"
	"testing"

	"github.com/dsec-dev/dsec/internal/cluster/noderpc"
	"github.com/dsec-dev/dsec/internal/session"
)

// Serve starts a Node RPC server for svc on 127.0.0.1 (stopped when the test
// ends) and returns its base URL and the server (to stop it early).
func Serve(t testing.TB, svc session.Service, opts noderpc.HandlerOptions) (string, *http.Server) {
	t.Helper()
	path, h := noderpc.NewHandler(svc, opts)
	mux := http.NewServeMux()
	mux.Handle(path, h)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := noderpc.NewServer(mux, noderpc.ServerOptions{})
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String(), srv
}
