package e2b_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	procpb "github.com/dsec-dev/dsec/internal/frontend/e2b/envdpb/process"
)

func TestNonZeroExitHasErrorText(t *testing.T) {
	e := newEnv(t)
	c := e.create(nil)
	st, err := e.process(c, false).Start(context.Background(), connect.NewRequest(&procpb.StartRequest{Process: &procpb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "exit 3"}}}))
	if err != nil {
		t.Fatal(err)
	}
	var end *procpb.ProcessEvent_EndEvent
	for st.Receive() {
		if x := st.Msg().GetEvent().GetEnd(); x != nil {
			end = x
		}
	}
	if end == nil || end.GetExitCode() != 3 || end.GetError() != "exit status 3" {
		t.Fatalf("end event %v (stream error %v)", end, st.Err())
	}
}

func TestCommandCutByKillDropsConnection(t *testing.T) {
	e := newEnv(t)
	c := e.create(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := e.process(c, false).Start(ctx, connect.NewRequest(&procpb.StartRequest{Process: &procpb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "sleep 1000"}}}))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Receive() || st.Msg().GetEvent().GetStart() == nil {
		t.Fatalf("no start event: %v", st.Err())
	}
	if res, b := e.call("DELETE", "/sandboxes/"+c.SandboxID, nil); res.StatusCode != http.StatusNoContent {
		t.Fatalf("kill: %d %s", res.StatusCode, b)
	}
	for st.Receive() {
		if end := st.Msg().GetEvent().GetEnd(); end != nil {
			t.Fatalf("a killed sandbox's command ended with %v; E2B drops the connection", end)
		}
	}
	err = st.Err()
	var ce *connect.Error
	if err == nil || ctx.Err() != nil {
		t.Fatalf("stream ended with %v (deadline: %v)", err, ctx.Err())
	}
	// The server sent no error of its own: the connection was cut.
	if errors.As(err, &ce) && (ce.Code() == connect.CodeNotFound || strings.Contains(ce.Message(), "sandbox")) {
		t.Fatalf("the server answered %v instead of dropping the connection", err)
	}
}
