package v1_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	v1reg "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	v1 "github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/internal/frontend/v1/openapitest"
	"github.com/dsec-dev/dsec/internal/image/registry/registrytest"
	"github.com/dsec-dev/dsec/internal/progress"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// GET /v1/images:pulls shows a pull stalled mid-layer with its bytes
// fetched; once the pull ends its reference is no longer in flight.
func TestPullProgressRoute(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.Start(t, "alice", "pw")
	p := newPuller(t, reg)
	srv := httptest.NewServer(openapitest.Wrap(t, v1.New(cacheService{agenttest.NewNode(t), p}, v1.Options{Token: token}).Handler()))
	t.Cleanup(srv.Close)
	cl := client.New(srv.URL, token, client.WithRetry(0))

	body := make([]byte, 256<<10)
	rnd := rand.New(rand.NewPCG(3, 4))
	for i := range body {
		body[i] = byte(rnd.Uint32())
	}
	l := registrytest.Layer(t, registrytest.Entry{Name: "big", Body: string(body)})
	size, _ := l.Size()
	ref := reg.Host + "/progress/route:1"
	want := reg.Push(t, "progress/route:1", registrytest.Image(t, v1reg.Config{}, l))
	var ae *api.Error
	if _, err := cl.PullProgress(ctx, ref); !errors.As(err, &ae) || ae.Code != api.CodeNotFound {
		t.Fatalf("progress before the pull: %v, want not_found", err)
	}

	const stallAt = 32 << 10
	reg.Stall(stallAt)
	t.Cleanup(reg.Resume) // on failure too: the registry's Close waits for its stalled requests
	done := make(chan error, 1)
	go func() {
		_, err := cl.PullImage(ctx, ref)
		done <- err
	}()
	// The CLI's watch: the client's poll drawn as plain lines (not a terminal).
	var lines bytes.Buffer
	show := progress.NewPull(&lines, ref)
	stalled := make(chan api.PullProgress, 1)
	wctx, stop := context.WithTimeout(ctx, 20*time.Second)
	defer stop()
	cl.WatchPull(wctx, ref, time.Millisecond, func(pr api.PullProgress) {
		show.Update(pr)
		if pr.FetchedBytes == stallAt {
			stalled <- pr
			stop()
		}
	})
	var got api.PullProgress
	select {
	case got = <-stalled:
	default:
		t.Fatalf("no progress to %d bytes within the deadline; shown:\n%s", stallAt, lines.String())
	}
	if !strings.Contains(lines.String(), "pulling "+ref+": fetching, 0/1 layers, ") || !strings.Contains(lines.String(), " of "+progress.Bytes(size)+" fetched\n") {
		t.Fatalf("plain progress lines:\n%s", lines.String())
	}
	if got.Digest != want || got.TotalBytes != size || got.Phase != api.PullFetching || len(got.Layers) != 1 {
		t.Fatalf("progress %+v, want digest %s, %d bytes, fetching", got, want, size)
	}
	all, err := cl.Pulls(ctx)
	if err != nil || len(all) != 1 || all[0].Ref != ref {
		t.Fatalf("pulls in flight %+v %v", all, err)
	}
	reg.Resume()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if pr, err := cl.PullProgress(ctx, ref); !errors.As(err, &ae) || ae.Code != api.CodeNotFound {
		t.Fatalf("progress after the pull: %+v %v, want not_found", pr, err)
	}

	// A node without a puller says so.
	bare := httptest.NewServer(v1.New(agenttest.NewNode(t), v1.Options{Token: token}).Handler())
	t.Cleanup(bare.Close)
	if _, err := client.New(bare.URL, token, client.WithRetry(0)).Pulls(ctx); !errors.As(err, &ae) || ae.Code != api.CodeNotImplemented {
		t.Fatalf("pulls without a puller: %v, want not_implemented", err)
	}
}
