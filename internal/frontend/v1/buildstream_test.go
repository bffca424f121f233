package v1_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	v1 "github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/internal/frontend/v1/openapitest"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// slowBuilds is a node whose builds read the context, then, by the context's
// content: "fail-early" fails before any output; "fail-late" writes a line
// and fails; anything else writes a line (in two writes), waits for release
// and answers.
type slowBuilds struct {
	session.Unimplemented
	release chan struct{}
}

func (b slowBuilds) BuildImage(ctx context.Context, req api.BuildImageRequest, r io.Reader) (api.BuildImageResult, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return api.BuildImageResult{}, err
	}
	switch string(data) {
	case "fail-early":
		return api.BuildImageResult{}, errdefs.Invalid("Dockerfile line 1: unknown instruction FORM")
	case "fail-late":
		if req.Output != nil {
			_, _ = req.Output.Write([]byte("about to fail\n"))
		}
		return api.BuildImageResult{}, errdefs.Invalid("Dockerfile line 2: RUN exit 3: exit code 3")
	}
	if req.Output != nil {
		_, _ = req.Output.Write([]byte("hello from "))
		_, _ = req.Output.Write([]byte("RUN\nno newline"))
	}
	select {
	case <-b.release:
	case <-ctx.Done():
		return api.BuildImageResult{}, ctx.Err()
	}
	return api.BuildImageResult{Image: api.Image{Name: req.Name, Kind: "layered"},
		Steps: []api.BuildStep{{Line: 1, Instruction: "RUN echo"}}, LayerSteps: 1}, nil
}

// lineWriter signals each line written to it.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for _, l := range strings.SplitAfter(string(p), "\n") {
		if l != "" {
			w.lines <- strings.TrimSuffix(l, "\n")
		}
	}
	return len(p), nil
}

// TestBuildStreamsLogs: with an output, the client gets the RUN output line
// by line while the build runs, then the result; without, the one JSON
// answer as before; a failure before any output keeps its status, one after
// it comes as the error event with its code and message.
func TestBuildStreamsLogs(t *testing.T) {
	svc := slowBuilds{release: make(chan struct{})}
	srv := httptest.NewServer(openapitest.Wrap(t, v1.New(svc, v1.Options{Token: token}).Handler()))
	t.Cleanup(srv.Close)
	cl := client.New(srv.URL, token, client.WithRetry(0))
	ctx := context.Background()

	out := &lineWriter{lines: make(chan string, 10)}
	type answer struct {
		res api.BuildImageResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := cl.BuildImage(ctx, api.BuildImageRequest{Name: "streamed", Output: out}, strings.NewReader("ok"))
		done <- answer{res, err}
	}()
	select {
	case l := <-out.lines:
		if l != "hello from RUN" {
			t.Errorf("first line %q", l)
		}
	case a := <-done:
		t.Fatalf("answered before a log line: %+v", a)
	case <-time.After(20 * time.Second):
		t.Fatal("no log line within 20s while the build runs")
	}
	close(svc.release)
	a := <-done
	if a.err != nil || a.res.Image.Name != "streamed" {
		t.Fatalf("result %+v, %v", a.res, a.err)
	}
	if got := out.buf.String(); got != "hello from RUN\nno newline\n" {
		t.Errorf("output %q", got)
	}

	// The default answer is unchanged: one JSON result, 201.
	req, _ := http.NewRequest("POST", srv.URL+"/v1/images:build?name=plain", strings.NewReader("ok"))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var res api.BuildImageResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil || resp.StatusCode != http.StatusCreated || res.Image.Name != "plain" {
		t.Errorf("default answer: %d %+v %v", resp.StatusCode, res, err)
	}
	resp.Body.Close()

	// stream=true gives NDJSON events to a client that did not send Accept.
	req, _ = http.NewRequest("POST", srv.URL+"/v1/images:build?name=q&stream=true", strings.NewReader("fail-late"))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var evs []api.BuildEvent
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev api.BuildEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		evs = append(evs, ev)
	}
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" || len(evs) != 2 ||
		evs[0].Log != "about to fail" || evs[1].Type != "error" || evs[1].Error.Code != api.CodeInvalidArgument {
		t.Errorf("stream=true: %s %+v", ct, evs)
	}

	for _, c := range []struct{ body, msg string }{
		{"fail-early", "unknown instruction FORM"},
		{"fail-late", "RUN exit 3: exit code 3"},
	} {
		out := &lineWriter{lines: make(chan string, 10)}
		_, err := cl.BuildImage(ctx, api.BuildImageRequest{Name: "f", Output: out}, strings.NewReader(c.body))
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.CodeInvalidArgument || ae.Status != http.StatusBadRequest || !strings.Contains(ae.Message, c.msg) {
			t.Errorf("%s: %v (%+v), want invalid_argument 400 naming %q", c.body, err, ae, c.msg)
		}
	}
}
