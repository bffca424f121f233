package metrics_test

import (
	"context"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/metrics"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// screenService is a node with a display: a fixed PNG, input echoed back.
type screenService struct{ session.Unimplemented }

func (screenService) Screenshot(ctx context.Context, id string) ([]byte, error) {
	return []byte("\x89PNG"), nil
}

func (screenService) SendInput(ctx context.Context, id string, req api.InputRequest) (api.InputResult, error) {
	return api.InputResult{}, nil
}

// TestScreenPassesThrough: the metrics decorator hands screenshots and input
// to a node that has them (FullVM behind dsec server went through it and got
// not_implemented), and answers not_implemented for one that has none.
func TestScreenPassesThrough(t *testing.T) {
	m := metrics.New(metrics.Options{Backends: []string{"fullvm"}, DefaultBackend: "fullvm", NoProcess: true})
	svc := m.Wrap(screenService{}, nil)
	if b, err := svc.Screenshot(context.Background(), "sb-1"); err != nil || string(b) != "\x89PNG" {
		t.Fatalf("screenshot through the decorator: %q, %v", b, err)
	}
	if _, err := svc.SendInput(context.Background(), "sb-1", api.InputRequest{Text: "hi"}); err != nil {
		t.Fatalf("input through the decorator: %v", err)
	}
	bare := m.Wrap(session.Unimplemented{}, nil)
	if _, err := bare.Screenshot(context.Background(), "sb-1"); !errdefs.Is(err, api.CodeNotImplemented) {
		t.Errorf("screenshot of a node without a display: %v, want not_implemented", err)
	}
}
