package v1_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http/httptest"
	"testing"
	"time"

	v1reg "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	v1 "github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/internal/frontend/v1/openapitest"
	"github.com/dsec-dev/dsec/internal/image/registry/registrytest"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// GET /v1/images:pulls shows a pull stalled mid-layer with its bytes
// fetched; once the pull ends its reference is no longer in flight.
func TestPullProgressRoute(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.Start(t, "alice", "pw")
	p := newPuller(t, reg)
	srv := httptest.NewServer(openapitest.Wrap(t, v1.New(cacheService{agenttest.NewNode(t), p}, v1.Options{Token: token, Pulls: p}).Handler()))
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
	done := make(chan error, 1)
	go func() {
		_, err := cl.PullImage(ctx, ref)
		done <- err
	}()
	deadline := time.Now().Add(20 * time.Second)
	var got api.PullProgress
	for {
		pr, err := cl.PullProgress(ctx, ref)
		if err == nil && pr.FetchedBytes == stallAt {
			got = pr
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no progress to %d bytes: last %+v %v", stallAt, pr, err)
		}
		time.Sleep(5 * time.Millisecond)
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

	// A server without a puller says so.
	bare := httptest.NewServer(v1.New(cacheService{agenttest.NewNode(t), p}, v1.Options{Token: token}).Handler())
	t.Cleanup(bare.Close)
	if _, err := client.New(bare.URL, token, client.WithRetry(0)).Pulls(ctx); !errors.As(err, &ae) || ae.Code != api.CodeNotImplemented {
		t.Fatalf("pulls without a puller: %v, want not_implemented", err)
	}
}
