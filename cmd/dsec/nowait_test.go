package main

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/pkg/api"
)

// `dsec create --no-wait` sends wait false; dsec ls shows a pulling
// sandbox's progress and a failed one's error code.
func TestCreateNoWait(t *testing.T) {
	node := agenttest.NewNode(t)
	srv := httptest.NewServer(v1.New(node, v1.Options{Token: "t"}).Handler())
	defer srv.Close()
	t.Setenv("DSEC_ADDR", srv.URL)
	t.Setenv("DSEC_TOKEN", "t")
	c := createCmd()
	c.SetArgs([]string{"--no-wait"})
	c.SetContext(context.Background())
	c.SilenceUsage, c.SilenceErrors = true, true
	if err := c.Execute(); err != nil {
		t.Fatal(err)
	}
	creates := node.Creates()
	if len(creates) != 1 || creates[0].Wait == nil || *creates[0].Wait {
		t.Fatalf("creates %+v, want one with wait false", creates)
	}
	for _, tc := range []struct {
		sb   api.Sandbox
		want string
	}{
		{api.Sandbox{State: api.StatePulling, Pull: &api.PullProgress{FetchedBytes: 25, TotalBytes: 100}}, "pulling (25%)"},
		{api.Sandbox{State: api.StatePulling, Pull: &api.PullProgress{Phase: api.PullResolving}}, "pulling"},
		{api.Sandbox{State: api.StateFailed, Error: &api.Error{Code: api.CodeNotFound}}, "failed (not_found)"},
	} {
		if got := stateOf(tc.sb); got != tc.want {
			t.Errorf("state column %q, want %q", got, tc.want)
		}
	}
}
