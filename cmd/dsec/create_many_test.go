package main

import (
	"bytes"
	"context"
	"io"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// TestCreateManyQuietWhenPiped: `dsec create --count` prints one ID per
// sandbox and, with its progress output a pipe, nothing else.
func TestCreateManyQuietWhenPiped(t *testing.T) {
	node := agenttest.NewNode(t)
	srv := httptest.NewServer(v1.New(session.Chain(node, session.Validating(nil)), v1.Options{Token: "t"}).Handler())
	defer srv.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	req := api.CreateSandboxRequest{Labels: map[string]string{"batch": "b1"}, RequestID: "job"}
	if err := createMany(context.Background(), client.New(srv.URL, "t"), req, 7, 3, &out, pw); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	progressOut, _ := io.ReadAll(pr)
	if len(progressOut) != 0 {
		t.Errorf("progress written to a pipe: %q", progressOut)
	}
	ids := strings.Fields(out.String())
	seen := map[string]bool{}
	for _, id := range ids {
		seen[id] = true
	}
	if len(ids) != 7 || len(seen) != 7 {
		t.Errorf("stdout %q: want 7 distinct IDs", out.String())
	}
	creates := node.Creates()
	if len(creates) != 7 || creates[0].Labels["batch"] != "b1" {
		t.Errorf("creates %+v", creates)
	}
	// The same batch again (same request ID): the same sandboxes.
	out.Reset()
	if err := createMany(context.Background(), client.New(srv.URL, "t"), req, 7, 3, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, id := range strings.Fields(out.String()) {
		if !seen[id] {
			t.Errorf("retried batch made a new sandbox %s", id)
		}
	}
	for _, bad := range [][2]int{{0, 1}, {3, 0}, {3, 1000}} {
		if err := createMany(context.Background(), client.New(srv.URL, "t"), req, bad[0], bad[1], io.Discard, io.Discard); err == nil {
			t.Errorf("count %d parallel %d accepted", bad[0], bad[1])
		}
	}
}
