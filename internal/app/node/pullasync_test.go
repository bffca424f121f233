package node

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// TestCreateWithoutWait: a create with wait false of an image the node
// lacks answers at once in state pulling; GET shows the pull (its large
// layer stalled mid-blob); once the registry goes on the same sandbox runs
// the image. A tag the registry lacks ends in state failed, not_found.
func TestCreateWithoutWait(t *testing.T) {
	d, reg := pullNode(t)
	srv := httptest.NewServer(d.Server.Handler())
	t.Cleanup(srv.Close)
	cl := client.New(srv.URL, "test", client.WithRetry(0))
	ctx := context.Background()

	ref, want := stalledImage(t, reg, "tasks/nowait:1", 11)
	noWait := false

	start := time.Now()
	sb, err := cl.Create(ctx, api.CreateSandboxRequest{Image: ref, Wait: &noWait})
	if err != nil || sb.State != api.StatePulling {
		t.Fatalf("create %+v %v, want state pulling", sb, err)
	}
	answered := time.Since(start)
	var got api.Sandbox
	testwait.For(t, 60*time.Second, "GET to show the stalled layer", func() bool {
		got, err = cl.Get(ctx, sb.ID)
		return err == nil && got.Pull != nil && len(got.Pull.Layers) == 2 && got.Pull.Layers[1].FetchedBytes == stallBytes
	})
	if got.State != api.StatePulling || got.ImageDigest != want || got.Pull.Digest != want {
		t.Fatalf("GET while pulling %+v, want state pulling of %s", got, want)
	}
	t.Logf("create with wait false answered in %s, in state pulling", answered)
	reg.Resume()
	testwait.For(t, 60*time.Second, "the sandbox to run", func() bool {
		got, err = cl.Get(ctx, sb.ID)
		return err == nil && got.State != api.StatePulling
	})
	if got.State != api.StateRunning || got.ImageDigest != want || got.Pull != nil {
		t.Fatalf("after the pull %+v (error %+v), want running on %s", got, got.Error, want)
	}
	if out, code := sh(t, d, sb.ID, "wc -c < /data/big"); code != 0 || out != "262144" {
		t.Fatalf("the large file in the sandbox: %q (exit %d)", out, code)
	}
	if err := cl.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}

	missing := reg.Host + "/tasks/nowait:no-such-tag"
	sb, err = cl.Create(ctx, api.CreateSandboxRequest{Image: missing, Wait: &noWait})
	if err != nil || sb.State != api.StatePulling {
		t.Fatalf("create of a missing tag %+v %v, want state pulling", sb, err)
	}
	testwait.For(t, 60*time.Second, "the create to fail", func() bool {
		got, err = cl.Get(ctx, sb.ID)
		return err == nil && got.State != api.StatePulling
	})
	if got.State != api.StateFailed || got.Error == nil || got.Error.Code != api.CodeNotFound || got.Error.Infrastructure {
		t.Fatalf("a missing tag: %+v (error %+v), want failed, not_found, not infrastructure", got, got.Error)
	}
	if err := cl.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
}
