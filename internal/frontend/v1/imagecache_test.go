package v1_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	v1reg "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/errdefs"
	v1 "github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/internal/frontend/v1/openapitest"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/pull"
	"github.com/dsec-dev/dsec/internal/image/pull/pulltest"
	"github.com/dsec-dev/dsec/internal/image/registry/registrytest"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// cacheService serves the image routes from a real puller (as a node does:
// GET pulls a reference, DELETE removes it from the cache, the list shows
// the pulled references); inUse plays the node's sandboxes.
type cacheService struct {
	*agenttest.Node
	p *pull.Puller
}

func (s cacheService) Images(context.Context) ([]api.Image, error) {
	imgs, err := s.p.PulledRefs()
	out := []api.Image{}
	for _, img := range imgs {
		out = append(out, img.View(nil, false))
	}
	return out, err
}

func (s cacheService) Image(ctx context.Context, name string) (api.Image, error) {
	img, err := s.p.PullRef(ctx, name)
	return img.View(nil, false), err
}

func (s cacheService) ImagePulls(_ context.Context, ref string) ([]api.PullProgress, error) {
	return (&image.Store{Refs: s.p}).Pulls(ref)
}

func (s cacheService) RemoveImage(ctx context.Context, name string) error {
	if !image.IsReference(name) {
		return errdefs.NotFound("no environment %q", name)
	}
	_, err := s.p.Remove(ctx, name)
	return err
}

// newPuller is a node's puller of reg's images (user alice, password pw).
func newPuller(t *testing.T, reg *registrytest.Registry) *pull.Puller {
	return pulltest.New(t, reg, "alice", "pw")
}

func TestImageCacheRemoveAndPrune(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.Start(t, "alice", "pw")
	p := newPuller(t, reg)
	used := map[string][]string{}
	p.InUse = func(context.Context) (map[string][]string, error) { return used, nil }
	srv := httptest.NewServer(openapitest.Wrap(t, v1.New(cacheService{agenttest.NewNode(t), p}, v1.Options{Token: token}).Handler()))
	t.Cleanup(srv.Close)
	cl := client.New(srv.URL, token, client.WithRetry(0))

	layer := func(s string) v1reg.Layer { return registrytest.Layer(t, registrytest.Entry{Name: s, Body: s}) }
	busy := reg.Host + "/cache/busy:1"
	idle := reg.Host + "/cache/idle:1"
	reg.Push(t, "cache/busy:1", registrytest.Image(t, v1reg.Config{}, layer("busy")))
	reg.Push(t, "cache/idle:1", registrytest.Image(t, v1reg.Config{}, layer("idle")))
	bi, err := cl.PullImage(ctx, busy)
	if err != nil {
		t.Fatal(err)
	}
	ii, err := cl.PullImage(ctx, idle)
	if err != nil {
		t.Fatal(err)
	}
	used[bi.Digest] = []string{"sb-0001"}

	// The list shows digest, size and last use.
	imgs, err := cl.Images(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(imgs) != 2 {
		t.Fatalf("images %+v", imgs)
	}
	for _, img := range imgs {
		if img.Digest == "" || img.Size <= 0 || img.LastUsed == nil || img.LastUsed.IsZero() {
			t.Errorf("image %s: digest %q size %d last_used %v", img.Name, img.Digest, img.Size, img.LastUsed)
		}
	}

	// Removing the image a sandbox uses: 409 conflict, naming both.
	err = cl.DeleteImage(ctx, busy)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeConflict || !strings.Contains(ae.Message, "sb-0001") || !strings.Contains(ae.Message, "cache/busy:1") {
		t.Fatalf("DELETE of an image in use: %v, want conflict naming the image and sb-0001", err)
	}
	req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/v1/images/"+url.PathEscape(bi.Digest), nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("DELETE by digest of an image in use: %d, want 409", resp.StatusCode)
	}

	// Prune: the idle image goes, the busy one stays.
	res, err := cl.PruneImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Removed) != 1 || res.Removed[0].Digest != ii.Digest || len(res.InUse) != 1 || res.InUse[0].Digest != bi.Digest || res.Bytes != ii.Size {
		t.Fatalf("prune: %+v; want %s removed (%d bytes), %s in use", res, ii.Digest, ii.Size, bi.Digest)
	}
	if err := cl.DeleteImage(ctx, idle); !errors.As(err, &ae) || ae.Code != api.CodeNotFound {
		t.Fatalf("DELETE of a pruned image: %v, want not_found", err)
	}
	// The sandbox is gone: the image can be removed by reference.
	delete(used, bi.Digest)
	if err := cl.DeleteImage(ctx, busy); err != nil {
		t.Fatal(err)
	}
	if imgs, err := cl.Images(ctx); err != nil || len(imgs) != 0 {
		t.Fatalf("after removing both: %+v %v", imgs, err)
	}
	if has, _ := p.Blobs.List(ctx); len(has) != 0 {
		t.Fatalf("blobs left: %v", has)
	}
}
