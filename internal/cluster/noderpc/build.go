package noderpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"connectrpc.com/connect"

	"github.com/dsec-dev/dsec/internal/cluster/noderpc/noderpcpb"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Build runs a Dockerfile build on the node: the request frame, then the
// build context's frames until the client closes its side; the RUN steps'
// output goes back as log frames while the build runs (req.Output), the
// result last. The build's context ends with the stream, so a client that
// goes away cancels the build.
func (h *handler) Build(ctx context.Context, st *connect.BidiStream[noderpcpb.BuildInput, noderpcpb.BuildOutput]) error {
	first, err := st.Receive()
	if err != nil {
		return err
	}
	var req api.BuildImageRequest
	if err := json.Unmarshal(first.GetRequest(), &req); err != nil || first.GetRequest() == nil {
		return toWire(errdefs.Invalid("node rpc Build: the first frame must be the request (%v)", err))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex // Send is not safe for concurrent use; logs come from the RUN's output copiers
	send := func(m *noderpcpb.BuildOutput) error {
		mu.Lock()
		defer mu.Unlock()
		return st.Send(m)
	}
	req.Output = frameWriter(func(b []byte) error {
		return send(&noderpcpb.BuildOutput{Frame: &noderpcpb.BuildOutput_Log{Log: append([]byte(nil), b...)}})
	})
	buildCtx := &frameReader{next: func() ([]byte, error) {
		m, err := st.Receive()
		if errors.Is(err, io.EOF) {
			return nil, io.EOF // the client closed its side: the context is whole
		}
		if err != nil {
			return nil, err
		}
		if c, ok := m.GetFrame().(*noderpcpb.BuildInput_Context); ok {
			return c.Context, nil
		}
		return nil, errdefs.Invalid("node rpc Build: a frame after the request that is not context")
	}}
	res, err := h.svc.BuildImage(ctx, req, buildCtx)
	if err != nil {
		return toWire(err)
	}
	b, err := json.Marshal(res)
	if err != nil {
		return toWire(errdefs.Internal(err, "node rpc Build: encoding the result"))
	}
	return send(&noderpcpb.BuildOutput{Frame: &noderpcpb.BuildOutput_Result{Result: b}})
}

// BuildImage runs a Dockerfile build on the node: buildContext streams to it
// in chunks while the RUN steps' output (req.Output, if set) is written as
// the node sends it. Ending ctx ends the stream and so the node's build.
func (c *Client) BuildImage(ctx context.Context, req api.BuildImageRequest, buildContext io.Reader) (_ api.BuildImageResult, err error) {
	const op = "Build"
	ctx, end := c.span(ctx, op)
	defer func() { end(err) }()
	b, err := json.Marshal(req)
	if err != nil {
		return api.BuildImageResult{}, errdefs.Internal(err, "node rpc %s: encoding the request", op)
	}
	sctx, cancel := context.WithCancel(ctx)
	st := c.rpc.Build(sctx)
	// As in ExecStream: closing the response ends a Receive when ctx ends.
	defer context.AfterFunc(sctx, func() { _ = st.CloseResponse() })()
	defer cancel()
	if err := st.Send(&noderpcpb.BuildInput{Frame: &noderpcpb.BuildInput_Request{Request: b}}); err != nil && !errors.Is(err, io.EOF) {
		return api.BuildImageResult{}, fromWire(ctx, op, err)
	}
	upload := make(chan error, 1)
	go func() {
		err := sendAll(buildContext, func(b []byte) error {
			return st.Send(&noderpcpb.BuildInput{Frame: &noderpcpb.BuildInput_Context{Context: b}})
		})
		switch {
		case errors.Is(err, io.EOF): // the node answered early; its answer says why
			err = nil
		case err != nil:
			err = fmt.Errorf("node rpc %s: reading the build context: %w", op, err)
			cancel()
		}
		_ = st.CloseRequest()
		upload <- err
	}()
	for {
		m, rerr := st.Receive()
		if rerr != nil {
			cancel()
			if uerr := <-upload; uerr != nil {
				return api.BuildImageResult{}, uerr
			}
			if errors.Is(rerr, io.EOF) {
				rerr = errors.New("the stream ended without a result")
			}
			return api.BuildImageResult{}, fromWire(ctx, op, rerr)
		}
		switch f := m.GetFrame().(type) {
		case *noderpcpb.BuildOutput_Log:
			if req.Output != nil {
				_, _ = req.Output.Write(f.Log) // a slow or failed log reader does not fail the build
			}
		case *noderpcpb.BuildOutput_Result:
			var res api.BuildImageResult
			if err := json.Unmarshal(f.Result, &res); err != nil {
				return api.BuildImageResult{}, errdefs.Wrap(api.CodeInternal, err, "node rpc %s: decoding the result", op)
			}
			return res, nil
		}
	}
}

// PruneBuildCache asks the node to prune its Dockerfile build cache.
func (c *Client) PruneBuildCache(ctx context.Context) (api.BuildCachePruned, error) {
	return callFor[api.BuildCachePruned](ctx, c, "PruneBuildCache", callArgs{})
}
