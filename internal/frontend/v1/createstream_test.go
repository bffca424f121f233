package v1_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"

	v1reg "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	v1 "github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/internal/frontend/v1/openapitest"
	"github.com/dsec-dev/dsec/internal/image/registry/registrytest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// pullingCreate creates by pulling the image through the node's puller, as
// a node does for a reference it lacks.
type pullingCreate struct{ cacheService }

func (s pullingCreate) Create(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	img, err := s.p.PullRef(ctx, req.Image)
	if err != nil {
		return api.Sandbox{}, err
	}
	return api.Sandbox{ID: "sb-streamed", Image: req.Image, ImageDigest: img.Digest, State: api.StateRunning}, nil
}

// streamCreate posts a streamed create and returns its events as they come.
func streamCreate(t *testing.T, url, image string) (<-chan api.CreateEvent, *http.Response) {
	t.Helper()
	body, _ := json.Marshal(api.CreateSandboxRequest{Image: image})
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/sandboxes?stream=true", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	evs := make(chan api.CreateEvent, 64)
	go func() {
		defer close(evs)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var ev api.CreateEvent
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				return
			}
			evs <- ev
		}
	}()
	return evs, resp
}

// A streamed create of a reference the node lacks answers the pull's
// progress as it changes (here stalled mid-layer), then the sandbox; one of
// a tag that does not exist answers its error with the status a plain
// create would have had.
func TestStreamedCreateShowsPullProgress(t *testing.T) {
	reg := registrytest.Start(t, "alice", "pw")
	p := newPuller(t, reg)
	srv := httptest.NewServer(openapitest.Wrap(t, v1.New(pullingCreate{cacheService{agenttest.NewNode(t), p}}, v1.Options{Token: token}).Handler()))
	t.Cleanup(srv.Close)

	body := make([]byte, 256<<10)
	rnd := rand.New(rand.NewPCG(5, 6))
	for i := range body {
		body[i] = byte(rnd.Uint32())
	}
	l := registrytest.Layer(t, registrytest.Entry{Name: "big", Body: string(body)})
	size, _ := l.Size()
	ref := reg.Host + "/stream/create:1"
	want := reg.Push(t, "stream/create:1", registrytest.Image(t, v1reg.Config{}, l))

	const stallAt = 32 << 10
	reg.Stall(stallAt)
	t.Cleanup(reg.Resume)
	evs, resp := streamCreate(t, srv.URL, ref)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("answer %d %s, want 200 NDJSON", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var stalled *api.PullProgress
	for ev := range evs {
		if ev.Type != api.CreateEventPull || ev.Pull == nil {
			t.Fatalf("event %+v before the pull reached %d bytes", ev, stallAt)
		}
		if ev.Pull.FetchedBytes == stallAt {
			stalled = ev.Pull
			break
		}
	}
	if stalled == nil || stalled.Digest != want || stalled.TotalBytes != size || stalled.Phase != api.PullFetching {
		t.Fatalf("stalled progress %+v, want digest %s, %d bytes, fetching", stalled, want, size)
	}
	reg.Resume()
	var last api.CreateEvent
	for ev := range evs {
		last = ev
	}
	if last.Type != api.CreateEventSandbox || last.Sandbox == nil || last.Sandbox.ImageDigest != want {
		t.Fatalf("last event %+v, want the sandbox on %s", last, want)
	}

	evs, _ = streamCreate(t, srv.URL, reg.Host+"/stream/create:missing")
	for ev := range evs {
		last = ev
	}
	if last.Type != api.CreateEventError || last.Error == nil || last.Error.Code != api.CodeNotFound || last.Status != http.StatusNotFound {
		t.Fatalf("last event of a missing tag %+v, want error not_found 404", last)
	}
}
