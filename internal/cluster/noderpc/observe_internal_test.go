package noderpc

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/dsec-dev/dsec/internal/cluster/noderpc/noderpcpb"
	"github.com/dsec-dev/dsec/internal/cluster/noderpc/noderpcpb/noderpcpbconnect"
)

type seen struct {
	mu  sync.Mutex
	got []string
}

func (s *seen) RPC(procedure, code string, _ time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, procedure+" "+code)
}

// A method name the handler does not serve is reported as "other" (a caller
// cannot grow the metrics' label values), and with the right code.
func TestObserverBoundsProcedures(t *testing.T) {
	secret := []byte("0123456789abcdef")
	obs := &seen{}
	path, h := NewHandler(nil, HandlerOptions{Secret: secret, Observer: obs})
	mux := http.NewServeMux()
	mux.Handle(path, h)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := noderpcpbconnect.NewNodeClient(srv.Client(), srv.URL)
	for _, m := range []string{"made-up-1", "made-up-2"} {
		req := connect.NewRequest(&noderpcpb.CallRequest{Method: m})
		req.Header().Set("Authorization", "Bearer "+signToken(secret, time.Now()))
		if _, err := c.Call(t.Context(), req); connect.CodeOf(err) != connect.CodeUnimplemented {
			t.Fatalf("method %q: %v, want unimplemented", m, err)
		}
	}
	req := connect.NewRequest(&noderpcpb.CallRequest{Method: "Info"}) // no token
	if _, err := c.Call(t.Context(), req); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("no token: %v", err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	want := []string{"other not_implemented", "other not_implemented", "Info unauthorized"}
	if len(obs.got) != len(want) {
		t.Fatalf("observed %v, want %v", obs.got, want)
	}
	for i := range want {
		if obs.got[i] != want[i] {
			t.Errorf("observed %v, want %v", obs.got, want)
		}
	}
}
