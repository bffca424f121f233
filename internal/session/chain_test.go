package session_test

import (
	"context"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// base serves Get and nothing else.
type base struct{ session.Unimplemented }

func (base) Get(_ context.Context, id string) (api.Sandbox, error) { return api.Sandbox{ID: id}, nil }

// tagger is an interceptor that overrides Get only, recording its name.
type tagger struct {
	session.Service
	name string
	log  *[]string
}

func (t tagger) Get(ctx context.Context, id string) (api.Sandbox, error) {
	*t.log = append(*t.log, t.name)
	return t.Service.Get(ctx, id)
}

func tag(name string, log *[]string) session.Interceptor {
	return func(next session.Service) session.Service { return tagger{Service: next, name: name, log: log} }
}

// TestChainOrder: the first interceptor is outermost, and a method no
// interceptor overrides reaches the base as it is.
func TestChainOrder(t *testing.T) {
	var log []string
	svc := session.Chain(base{}, tag("a", &log), nil, tag("b", &log))
	sb, err := svc.Get(context.Background(), "sb-1")
	if err != nil || sb.ID != "sb-1" {
		t.Fatalf("Get through the chain: %+v, %v", sb, err)
	}
	if got := strings.Join(log, " "); got != "a b" {
		t.Errorf("interceptors ran %q, want \"a b\"", got)
	}
	// Fork is overridden by no one: the base's Unimplemented answers it.
	if _, err := svc.Fork(context.Background(), "sb-1", api.ForkRequest{}); !errdefs.Is(err, api.CodeNotImplemented) {
		t.Errorf("Fork through the chain: %v, want not_implemented", err)
	}
	if session.Chain(base{}) != (base{}) {
		t.Error("Chain without interceptors is not the base")
	}
}

// TestUnimplemented: every group's methods answer not_implemented, naming
// what is missing.
func TestUnimplemented(t *testing.T) {
	ctx := context.Background()
	var u session.Service = session.Unimplemented{}
	for name, call := range map[string]func() error{
		"Create":     func() error { _, err := u.Create(ctx, api.CreateSandboxRequest{}); return err },
		"Exec":       func() error { _, err := u.Exec(ctx, "x", api.ExecRequest{}); return err },
		"FS":         func() error { _, err := u.FS(ctx, "x"); return err },
		"SetNetwork": func() error { _, err := u.SetNetwork(ctx, "x", api.NetworkPolicy{}); return err },
		"Screenshot": func() error { _, err := u.Screenshot(ctx, "x"); return err },
		"HTTP":       func() error { _, err := u.HTTP(ctx, "x", 80, session.HTTPRequest{}); return err },
		"FnCall":     func() error { _, err := u.FnCall(ctx, api.FnCallRequest{}); return err },
		"Compose":    func() error { _, err := u.Compose(ctx, api.ComposeImageRequest{}); return err },
		"Trajectory": func() error { _, err := u.GetTrajectory(ctx, "t"); return err },
		"ListNodes":  func() error { _, err := u.ListNodes(ctx); return err },
		"SetQuota":   func() error { _, err := u.SetQuota(ctx, "p", api.Quota{}); return err },
	} {
		err := call()
		if !errdefs.Is(err, api.CodeNotImplemented) {
			t.Errorf("%s: %v, want not_implemented", name, err)
		}
	}
}

func TestWithServices(t *testing.T) {
	info := session.WithServices(api.Info{Services: []string{api.ServiceImages}}, api.ServiceTrajectories, api.ServiceImages)
	if got := strings.Join(info.Services, ","); got != "images,trajectories" {
		t.Errorf("services %q", got)
	}
}
