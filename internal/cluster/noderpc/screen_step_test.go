package noderpc_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/dsec-dev/dsec/internal/cluster/noderpc"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// screenService is a fake FullVM node: a display and input, and a step log
// that answers step 1 of trajectory "t" from the log.
type screenService struct {
	fakeService
	png   []byte
	input chan api.InputRequest
	steps chan session.Step
}

func (s *screenService) Screenshot(ctx context.Context, id string) ([]byte, error) {
	return s.png, nil
}

func (s *screenService) SendInput(ctx context.Context, id string, req api.InputRequest) (api.InputResult, error) {
	s.input <- req
	return api.InputResult{}, nil
}

func (s *screenService) Exec(ctx context.Context, id string, req api.ExecRequest) (api.ExecResult, error) {
	st, out, ok := session.StepFrom(ctx)
	if ok {
		s.steps <- st
		out.Replayed = st.N == 1
	}
	return api.ExecResult{Stdout: "ok"}, nil
}

const screenSB = "sb-0000000000000001.fake"

// TestScreenAndInputCrossTheWire: a FullVM sandbox's screenshot (PNG bytes,
// unchanged) and input reach the node's service through the client.
func TestScreenAndInputCrossTheWire(t *testing.T) {
	svc := &screenService{png: []byte("\x89PNG\r\n\x1a\n\x00binary\xff"), input: make(chan api.InputRequest, 1)}
	c := serve(t, svc, noderpc.HandlerOptions{}).client(t, nil)
	ctx := ctxT(t)
	png, err := c.Screenshot(ctx, screenSB)
	if err != nil || !bytes.Equal(png, svc.png) {
		t.Fatalf("screenshot: %q %v, want %q", png, err, svc.png)
	}
	want := api.InputRequest{Text: "hello", Click: &api.Click{X: 3, Y: 4, Button: "right"}}
	if _, err := c.SendInput(ctx, screenSB, want); err != nil {
		t.Fatal(err)
	}
	if got := <-svc.input; got.Text != want.Text || got.Click == nil || *got.Click != *want.Click {
		t.Errorf("the node got input %+v, want %+v", got, want)
	}
	// A node whose service has no display answers not_implemented.
	plain := serve(t, &fakeService{}, noderpc.HandlerOptions{}).client(t, nil)
	_, err = plain.Screenshot(ctx, screenSB)
	wantCode(t, "screenshot on a node without a display", err, api.CodeNotImplemented)
	_, err = plain.SendInput(ctx, screenSB, want)
	wantCode(t, "input on a node without a display", err, api.CodeNotImplemented)
}

// TestStepTagCrossesTheWire: the caller's trajectory step tag reaches the
// node's service, and a step the node answered from its log is reported
// replayed in the caller's outcome.
func TestStepTagCrossesTheWire(t *testing.T) {
	svc := &screenService{steps: make(chan session.Step, 2)}
	c := serve(t, svc, noderpc.HandlerOptions{}).client(t, nil)
	for _, n := range []int{1, 2} {
		ctx, out := session.WithStep(ctxT(t), session.Step{Trajectory: "t", N: n})
		if _, err := c.Exec(ctx, screenSB, api.ExecRequest{Cmd: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-svc.steps:
			if got != (session.Step{Trajectory: "t", N: n}) {
				t.Errorf("the node saw step %+v, want t/%d", got, n)
			}
		default:
			t.Errorf("step %d arrived untagged", n)
		}
		if out.Replayed != (n == 1) {
			t.Errorf("step %d: replayed %v, want %v", n, out.Replayed, n == 1)
		}
	}
	// An untagged call stays untagged on the node.
	if _, err := c.Exec(ctxT(t), screenSB, api.ExecRequest{Cmd: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case st := <-svc.steps:
		t.Errorf("an untagged call arrived tagged %+v", st)
	default:
	}
}
