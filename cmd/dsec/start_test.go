package main

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// TestCreateStartFlags: `dsec create --start-cmd --ready-cmd --ready-port
// --ready-timeout --entrypoint` reach the server as the request's start
// fields; a bad value is the server's invalid_argument naming the field, and
// nothing is created.
func TestCreateStartFlags(t *testing.T) {
	node := agenttest.NewNode(t)
	srv := httptest.NewServer(v1.New(session.Chain(node, session.Validating(nil)), v1.Options{Token: "t"}).Handler())
	defer srv.Close()
	t.Setenv("DSEC_ADDR", srv.URL)
	t.Setenv("DSEC_TOKEN", "t")
	run := func(args ...string) error {
		c := createCmd()
		c.SetArgs(args)
		c.SetContext(context.Background())
		c.SilenceUsage, c.SilenceErrors = true, true
		return c.Execute()
	}
	if err := run("--start-cmd", "exec sleep 30", "--ready-cmd", "true", "--ready-timeout", "20s"); err != nil {
		t.Fatal(err)
	}
	creates := node.Creates()
	if len(creates) != 1 || creates[0].StartCmd != "exec sleep 30" || creates[0].ReadyCmd != "true" || creates[0].ReadyTimeoutMs != 20_000 {
		t.Fatalf("creates %+v", creates)
	}
	sbs, err := client.New(srv.URL, "t").List(context.Background())
	if err != nil || len(sbs) != 1 || stateOf(sbs[0]) != api.StateRunning || sbs[0].Start.State != api.StartReady {
		t.Fatalf("list %+v (%v)", sbs, err)
	}
	err = run("--start-cmd", "exit 5", "--ready-cmd", "false")
	if !errdefs.Is(err, api.CodeStartFailed) || !strings.Contains(err.Error(), "exit code 5") {
		t.Errorf("failed start: %v", err)
	}
	sbs, _ = client.New(srv.URL, "t").List(context.Background())
	failed := 0
	for _, s := range sbs {
		if stateOf(s) == "running (start failed)" {
			failed++
		}
	}
	if failed != 1 {
		t.Errorf("ls shows %d failed starts, want 1", failed)
	}
	n := len(node.Creates())
	for field, args := range map[string][]string{
		"ready_port":       {"--start-cmd", "sleep 9", "--ready-port", "0"},
		"ready_timeout_ms": {"--start-cmd", "sleep 9", "--ready-port", "80", "--ready-timeout", "0s"},
		"entrypoint":       {"--start-cmd", "sleep 9", "--entrypoint"},
		"start_cmd":        {"--start-cmd", " "},
	} {
		err := run(args...)
		if !errdefs.Is(err, api.CodeInvalidArgument) || !strings.Contains(err.Error(), field) {
			t.Errorf("%v: %v, want invalid_argument naming %s", args, err, field)
		}
	}
	if got := len(node.Creates()); got != n {
		t.Errorf("refused flags made %d creates", got-n)
	}
}
