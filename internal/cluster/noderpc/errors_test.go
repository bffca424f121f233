package noderpc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/cluster/noderpc"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// fakeService answers Get with err and counts every call that reached it; the
// other methods answer not_implemented (session.Unimplemented).
type fakeService struct {
	session.Unimplemented
	err   error
	calls atomic.Int64
}

func (f *fakeService) Get(ctx context.Context, id string) (api.Sandbox, error) {
	f.calls.Add(1)
	return api.Sandbox{ID: id}, f.err
}

func (f *fakeService) ExecStream(ctx context.Context, id string, req api.ExecRequest, s session.Stream) (api.ExecResult, error) {
	f.calls.Add(1)
	return api.ExecResult{}, f.err
}

func (f *fakeService) Dial(ctx context.Context, id string, port int) (net.Conn, error) {
	f.calls.Add(1)
	return nil, errdefs.NotFound("fake")
}

func (f *fakeService) ProcessLogs(ctx context.Context, id, procID, stream string, offset int64) (io.ReadCloser, error) {
	f.calls.Add(1)
	return nil, errdefs.NotFound("fake")
}

func (f *fakeService) FS(ctx context.Context, id string) (session.FS, error) {
	f.calls.Add(1)
	return nil, errdefs.NotFound("fake")
}

func (f *fakeService) List(ctx context.Context) ([]api.Sandbox, error) {
	f.calls.Add(1)
	return nil, nil
}

func (f *fakeService) Info(ctx context.Context) (api.Info, error) {
	f.calls.Add(1)
	return api.Info{Node: "fake", Version: "v", Backends: []string{"mock"}}, nil
}

func TestErrorsKeepTheirClass(t *testing.T) {
	for name, tc := range map[string]struct {
		err        error
		want       api.Error
		retryAfter time.Duration
	}{
		"not found":    {errdefs.NotFound("no sandbox %q", "x"), api.Error{Code: api.CodeNotFound, Message: `no sandbox "x"`}, 0},
		"wrapped":      {errdefs.Wrap(api.CodeConflict, errors.New("cause"), "paused"), api.Error{Code: api.CodeConflict, Message: "paused: cause"}, 0},
		"infra flags":  {&api.Error{Code: "node_lost", Message: "gone", Infrastructure: true}, api.Error{Code: "node_lost", Message: "gone", Infrastructure: true}, 0},
		"internal":     {errors.New("boom"), api.Error{Code: api.CodeInternal, Message: "boom", Infrastructure: true, Retryable: true}, 0},
		"retry after":  {&noderpc.Error{API: api.NewError(api.CodeResourceExhausted, "full"), RetryAfter: 3 * time.Second}, api.Error{Code: api.CodeResourceExhausted, Infrastructure: true, Retryable: true}, 3 * time.Second},
		"not impl":     {errdefs.New(api.CodeNotImplemented, "no"), api.Error{Code: api.CodeNotImplemented, Message: "no"}, 0},
		"unauthorized": {errdefs.New(api.CodeUnauthorized, "who"), api.Error{Code: api.CodeUnauthorized, Message: "who"}, 0},
	} {
		t.Run(name, func(t *testing.T) {
			c := serve(t, &fakeService{err: tc.err}, noderpc.HandlerOptions{}).client(t, nil)
			_, err := c.Get(ctxT(t), "sb-1")
			ae, ok := api.AsError(err)
			if !ok {
				t.Fatalf("error %v (%T) is no *api.Error", err, err)
			}
			if ae.Code != tc.want.Code || ae.Infrastructure != tc.want.Infrastructure || ae.Retryable != tc.want.Retryable ||
				(tc.want.Message != "" && ae.Message != tc.want.Message) {
				t.Errorf("got %+v, want %+v", *ae, tc.want)
			}
			if ae.Status != api.StatusOf(tc.want.Code) {
				t.Errorf("status %d, want %d", ae.Status, api.StatusOf(tc.want.Code))
			}
			if d, ok := noderpc.RetryAfter(err); d != tc.retryAfter || ok != (tc.retryAfter > 0) {
				t.Errorf("RetryAfter = %v, %v; want %v", d, ok, tc.retryAfter)
			}
			if errdefs.CodeOf(err) != tc.want.Code || errdefs.ToAPI(err) != ae {
				t.Errorf("errdefs sees %s / %+v", errdefs.CodeOf(err), errdefs.ToAPI(err))
			}
		})
	}
}

// A capability the node's service lacks is not_implemented, and nothing runs.
func TestMissingCapabilityIsNotImplemented(t *testing.T) {
	f := &fakeService{}
	c := serve(t, f, noderpc.HandlerOptions{}).client(t, nil)
	ctx := ctxT(t)
	_, err := c.Fork(ctx, "sb-1", api.ForkRequest{Count: 1})
	wantCode(t, "Fork", err, api.CodeNotImplemented)
	_, err = c.Commit(ctx, "sb-1", api.CommitRequest{Name: "x"})
	wantCode(t, "Commit", err, api.CodeNotImplemented)
	_, err = c.SetNetwork(ctx, "sb-1", api.NetworkPolicy{})
	wantCode(t, "SetNetwork", err, api.CodeNotImplemented)
	_, err = c.PauseWith(ctx, "sb-1", api.PauseRequest{})
	wantCode(t, "PauseWith", err, api.CodeNotImplemented)
	_, err = c.SetCPUClass(ctx, "sb-1", api.CPUClassBE)
	wantCode(t, "SetCPUClass", err, api.CodeNotImplemented)
	_, err = c.SetDeadline(ctx, "sb-1", api.DeadlineRequest{TimeoutSeconds: 5})
	wantCode(t, "SetDeadline", err, api.CodeNotImplemented)
	err = c.SendProcessInput(ctx, "sb-1", "p1", api.ProcessInput{Data: []byte("x")})
	wantCode(t, "SendProcessInput", err, api.CodeNotImplemented)
	_, err = c.CreateWatch(ctx, "sb-1", api.WatchRequest{Path: "/"})
	wantCode(t, "CreateWatch", err, api.CodeNotImplemented)
	_, err = c.WatchEvents(ctx, "sb-1", "w1")
	wantCode(t, "WatchEvents", err, api.CodeNotImplemented)
	err = c.RemoveWatch(ctx, "sb-1", "w1")
	wantCode(t, "RemoveWatch", err, api.CodeNotImplemented)
	_, err = c.FnCall(ctx, api.FnCallRequest{})
	wantCode(t, "FnCall", err, api.CodeNotImplemented)
	if n := f.calls.Load(); n != 0 {
		t.Errorf("%d calls reached the service", n)
	}
}

// transportErr checks a transport failure's class: unavailable, infrastructure.
func transportErr(t *testing.T, what string, err error) {
	t.Helper()
	ae, ok := api.AsError(err)
	if !ok || ae.Code != api.CodeUnavailable || !ae.Infrastructure {
		t.Errorf("%s: %v, want unavailable with infrastructure: true", what, err)
	}
}

func TestConnectionRefusedIsUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := noderpc.NewClient("http://"+addr, noderpc.ClientOptions{Secret: secret})
	defer c.Close()
	t0 := time.Now()
	_, err = c.Get(ctxT(t), "sb-1")
	transportErr(t, "Get of a closed port", err)
	_, err = c.ExecStream(ctxT(t), "sb-1", api.ExecRequest{Cmd: []string{"true"}}, session.Stream{})
	transportErr(t, "ExecStream to a closed port", err)
	_, err = c.Dial(ctxT(t), "sb-1", 80)
	transportErr(t, "Dial to a closed port", err)
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("refused calls took %v", d)
	}
}

// A node that accepts connections but never answers (hung, or its link is
// down) fails the call by keepalive, without any deadline from the caller.
func TestSilentNodeFailsByKeepalive(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close() // held open, never read
		}
	}()
	c := noderpc.NewClient("http://"+ln.Addr().String(), noderpc.ClientOptions{Secret: secret,
		PingInterval: 200 * time.Millisecond, PingTimeout: 300 * time.Millisecond})
	defer c.Close()
	done := make(chan error, 1)
	go func() { _, err := c.Get(context.Background(), "sb-1"); done <- err }()
	select {
	case err := <-done:
		transportErr(t, "Get of a silent node", err)
	case <-time.After(10 * time.Second):
		t.Fatal("a call to a silent node hung for 10 s")
	}
}

// A request over the node's message limit is payload_too_large, not a
// transport failure.
func TestOversizedCall(t *testing.T) {
	f := &fakeService{}
	c := serve(t, f, noderpc.HandlerOptions{}).client(t, nil)
	_, err := c.Create(ctxT(t), api.CreateSandboxRequest{Env: map[string]string{"BIG": strings.Repeat("x", 33<<20)}})
	wantCode(t, "Create with a 33 MiB env", err, api.CodePayloadTooLarge)
	if n := f.calls.Load(); n != 0 {
		t.Errorf("%d calls reached the service", n)
	}
}

// fakeForker also forks and has QoS.
type fakeForker struct{ fakeService }

func (f *fakeForker) Fork(ctx context.Context, id string, req api.ForkRequest) (api.ForkResult, error) {
	kids := make([]api.Sandbox, req.Count)
	for i := range kids {
		kids[i].ID = fmt.Sprintf("%s-child-%d", id, i)
	}
	return api.ForkResult{Parent: id, Children: kids, SnapshotBytes: 42}, nil
}

func (f *fakeForker) PauseWith(ctx context.Context, id string, req api.PauseRequest) (api.PauseResponse, error) {
	return api.PauseResponse{Sandbox: api.Sandbox{ID: id, State: api.StatePaused},
		Reclaim: &api.ReclaimResult{Swap: req.Reclaim, SwappedBytes: 7}}, nil
}

func (f *fakeForker) SetCPUClass(ctx context.Context, id, class string) (api.Sandbox, error) {
	return api.Sandbox{ID: id, CPUClass: class}, nil
}

func (f *fakeForker) SetDeadline(ctx context.Context, id string, req api.DeadlineRequest) (api.Sandbox, error) {
	at := time.Unix(req.TimeoutSeconds, 0).UTC()
	return api.Sandbox{ID: id, ExpiresAt: &at, OnExpiry: req.OnExpiry}, nil
}

// Optional interfaces the node's service has are forwarded with their
// arguments and answers intact.
func TestCapabilitiesForward(t *testing.T) {
	c := serve(t, &fakeForker{}, noderpc.HandlerOptions{}).client(t, nil)
	ctx := ctxT(t)
	fr, err := c.Fork(ctx, "sb-1", api.ForkRequest{Count: 2})
	if err != nil || fr.Parent != "sb-1" || len(fr.Children) != 2 || fr.Children[1].ID != "sb-1-child-1" || fr.SnapshotBytes != 42 {
		t.Errorf("Fork: %+v, %v", fr, err)
	}
	pr, err := c.PauseWith(ctx, "sb-1", api.PauseRequest{Reclaim: true})
	if err != nil || pr.State != api.StatePaused || pr.Reclaim == nil || !pr.Reclaim.Swap || pr.Reclaim.SwappedBytes != 7 {
		t.Errorf("PauseWith: %+v, %v", pr, err)
	}
	if sb, err := c.SetCPUClass(ctx, "sb-1", api.CPUClassBE); err != nil || sb.CPUClass != api.CPUClassBE {
		t.Errorf("SetCPUClass: %+v, %v", sb, err)
	}
	if sb, err := c.SetDeadline(ctx, "sb-1", api.DeadlineRequest{TimeoutSeconds: 77, OnExpiry: api.ExpiryPause}); err != nil ||
		sb.ExpiresAt == nil || sb.ExpiresAt.Unix() != 77 || sb.OnExpiry != api.ExpiryPause {
		t.Errorf("SetDeadline: %+v, %v", sb, err)
	}
	_, err = c.Commit(ctx, "sb-1", api.CommitRequest{Name: "x"})
	wantCode(t, "Commit on a node without it", err, api.CodeNotImplemented)
}
