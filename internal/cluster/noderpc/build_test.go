package noderpc_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// buildService is a node whose builds read the whole context, write a log
// line, wait for release (or their context's end) and answer.
type buildService struct {
	session.Unimplemented
	release chan struct{}
	err     error
	mu      sync.Mutex
	got     []byte
	req     api.BuildImageRequest
	ended   chan error // the build's context error when it returned
}

func (b *buildService) BuildImage(ctx context.Context, req api.BuildImageRequest, r io.Reader) (api.BuildImageResult, error) {
	data, err := io.ReadAll(r)
	b.mu.Lock()
	b.got, b.req = data, req
	b.mu.Unlock()
	if err != nil {
		return api.BuildImageResult{}, err
	}
	if b.err != nil {
		return api.BuildImageResult{}, b.err
	}
	_, _ = req.Output.Write([]byte("step one says hello\n"))
	select {
	case <-b.release:
	case <-ctx.Done():
		b.ended <- ctx.Err()
		return api.BuildImageResult{}, ctx.Err()
	}
	return api.BuildImageResult{Image: api.Image{Name: req.Name}, CacheHits: 1, LayerSteps: 2}, nil
}

func (b *buildService) PruneBuildCache(context.Context) (api.BuildCachePruned, error) {
	return api.BuildCachePruned{Entries: 3, Bytes: 4096}, nil
}

// notifyWriter signals on its first write.
type notifyWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	first chan struct{}
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buf.Len() == 0 {
		close(w.first)
	}
	return w.buf.Write(p)
}

// TestBuildStreamsContextAndLogs: the build context reaches the node whole
// (several chunks), the RUN output reaches the caller while the build still
// runs, and the result follows.
func TestBuildStreamsContextAndLogs(t *testing.T) {
	svc := &buildService{release: make(chan struct{}), ended: make(chan error, 1)}
	c := serve(t, svc, noderpcOpts()).client(t, nil)
	ctxData := bytes.Repeat([]byte("0123456789abcdef"), 200_000) // 3.2 MB: many frames
	out := &notifyWriter{first: make(chan struct{})}
	type answer struct {
		res api.BuildImageResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := c.BuildImage(ctxT(t), api.BuildImageRequest{Name: "built", Target: "final", Output: out}, bytes.NewReader(ctxData))
		done <- answer{res, err}
	}()
	select {
	case <-out.first:
	case a := <-done:
		t.Fatalf("the build answered before any log line: %+v", a)
	case <-time.After(30 * time.Second):
		t.Fatal("no log line within 30s while the build runs")
	}
	select {
	case a := <-done:
		t.Fatalf("the build answered before it was released: %+v", a)
	default:
	}
	close(svc.release)
	a := <-done
	if a.err != nil {
		t.Fatal(a.err)
	}
	if a.res.Image.Name != "built" || a.res.LayerSteps != 2 || a.res.CacheHits != 1 {
		t.Errorf("result %+v", a.res)
	}
	if got := out.buf.String(); got != "step one says hello\n" {
		t.Errorf("log %q", got)
	}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if !bytes.Equal(svc.got, ctxData) {
		t.Errorf("the node read %d bytes of context, want %d identical", len(svc.got), len(ctxData))
	}
	if svc.req.Name != "built" || svc.req.Target != "final" {
		t.Errorf("the node got request %+v", svc.req)
	}
}

// TestBuildErrorsKeepTheirCode: a build error crosses with its code and
// message; a caller that goes away cancels the node's build.
func TestBuildErrorsKeepTheirCode(t *testing.T) {
	svc := &buildService{err: errdefs.Invalid("Dockerfile line 3: RUN false: exit code 1"), ended: make(chan error, 1)}
	c := serve(t, svc, noderpcOpts()).client(t, nil)
	_, err := c.BuildImage(ctxT(t), api.BuildImageRequest{Name: "x"}, strings.NewReader("ctx"))
	wantCode(t, "failing build", err, api.CodeInvalidArgument)
	if err == nil || !strings.Contains(err.Error(), "Dockerfile line 3: RUN false") {
		t.Errorf("error %v does not name the line", err)
	}

	svc2 := &buildService{release: make(chan struct{}), ended: make(chan error, 1)}
	c2 := serve(t, svc2, noderpcOpts()).client(t, nil)
	ctx, cancel := context.WithCancel(ctxT(t))
	out := &notifyWriter{first: make(chan struct{})}
	errc := make(chan error, 1)
	go func() {
		_, err := c2.BuildImage(ctx, api.BuildImageRequest{Name: "x", Output: out}, strings.NewReader("ctx"))
		errc <- err
	}()
	<-out.first
	cancel()
	select {
	case err := <-svc2.ended:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the node's build ended with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the node's build still runs 30s after its caller went away")
	}
	if err := <-errc; err == nil {
		t.Error("a cancelled build answered no error")
	}

	p, err := c2.PruneBuildCache(ctxT(t))
	if err != nil || p.Entries != 3 || p.Bytes != 4096 {
		t.Errorf("prune: %+v %v", p, err)
	}
}
