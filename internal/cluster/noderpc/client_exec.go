package noderpc

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"

	"connectrpc.com/connect"

	"github.com/dsec-dev/dsec/internal/cluster/noderpc/noderpcpb"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// ExecStream runs a command on the node with live I/O: s.Stdin and s.Control
// are pumped to the node while its output frames are written to s.Stdout and
// s.Stderr. It returns when the node sends the exit, when ctx ends, or (as
// unavailable) when the connection drops.
func (c *Client) ExecStream(ctx context.Context, id string, req api.ExecRequest, s session.Stream) (_ api.ExecResult, err error) {
	const op = "ExecStream"
	ctx, end := c.span(ctx, op)
	defer func() { end(err) }()
	b, err := json.Marshal(req)
	if err != nil {
		return api.ExecResult{}, errdefs.Internal(err, "node rpc %s: encoding the request", op)
	}
	sctx, cancel := context.WithCancel(ctx)
	st := c.rpc.ExecStream(sctx)
	// Closing the response is what ends a Receive when ctx ends: net/http does
	// not abort a stream whose request body it is still waiting on.
	defer context.AfterFunc(sctx, func() { _ = st.CloseResponse() })()
	defer cancel()
	var mu sync.Mutex
	send := func(m *noderpcpb.ExecInput) error {
		mu.Lock()
		defer mu.Unlock()
		return st.Send(m)
	}
	start := &noderpcpb.ExecStart{Sandbox: id, Request: b, NoStdin: s.Stdin == nil}
	if err := send(&noderpcpb.ExecInput{Frame: &noderpcpb.ExecInput_Start{Start: start}}); err != nil && !errors.Is(err, io.EOF) {
		return api.ExecResult{}, fromWire(ctx, op, err)
	}
	go pumpInput(sctx, s, send)
	for {
		m, err := st.Receive()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the stream ended without an exit")
			}
			return api.ExecResult{}, fromWire(ctx, op, err)
		}
		switch f := m.GetFrame().(type) {
		case *noderpcpb.ExecOutput_StartedPid:
			if s.Started != nil {
				s.Started(int(f.StartedPid))
			}
		case *noderpcpb.ExecOutput_Stdout:
			if s.Stdout != nil {
				if _, err := s.Stdout.Write(f.Stdout); err != nil {
					return api.ExecResult{}, errdefs.Wrap(api.CodeInternal, err, "node rpc %s: writing stdout", op)
				}
			}
		case *noderpcpb.ExecOutput_Stderr:
			if s.Stderr != nil {
				if _, err := s.Stderr.Write(f.Stderr); err != nil {
					return api.ExecResult{}, errdefs.Wrap(api.CodeInternal, err, "node rpc %s: writing stderr", op)
				}
			}
		case *noderpcpb.ExecOutput_Exit:
			var res api.ExecResult
			if err := json.Unmarshal(f.Exit, &res); err != nil {
				return api.ExecResult{}, errdefs.Wrap(api.CodeInternal, err, "node rpc %s: decoding the result", op)
			}
			return res, nil
		}
	}
}

// pumpInput sends s.Stdin and s.Control to the node from one goroutine, in the
// order the caller gave them: a control message (a resize, a signal) taken
// before some input was written goes out before that input, so a program that
// reads a line and then asks for its terminal size sees the new size. Pending
// control messages always go before the next input chunk.
func pumpInput(ctx context.Context, s session.Stream, send func(*noderpcpb.ExecInput) error) {
	type chunk struct {
		b   []byte
		eof bool
	}
	var in chan chunk
	if s.Stdin != nil {
		in = make(chan chunk)
		go func() {
			put := func(c chunk) error {
				select {
				case in <- c:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			err := sendAll(s.Stdin, func(b []byte) error { return put(chunk{b: append([]byte(nil), b...)}) })
			if err == nil {
				_ = put(chunk{eof: true})
			}
		}()
	}
	ctl := s.Control
	control := func(c session.Control) error {
		m := &noderpcpb.ExecInput{Frame: &noderpcpb.ExecInput_Signal{Signal: int32(c.Signal)}}
		if c.Resize != nil {
			m.Frame = &noderpcpb.ExecInput_Resize{Resize: &noderpcpb.Resize{Cols: int32(c.Resize.Cols), Rows: int32(c.Resize.Rows)}}
		}
		return send(m)
	}
	for ctl != nil || in != nil {
		select { // control first
		case c, ok := <-ctl:
			if !ok {
				ctl = nil
			} else if control(c) != nil {
				return
			}
			continue
		default:
		}
		select {
		case c, ok := <-ctl:
			if !ok {
				ctl = nil
			} else if control(c) != nil {
				return
			}
		case c := <-in:
			var err error
			if c.eof {
				in = nil
				err = send(&noderpcpb.ExecInput{Frame: &noderpcpb.ExecInput_StdinEof{StdinEof: true}})
			} else {
				err = send(&noderpcpb.ExecInput{Frame: &noderpcpb.ExecInput_Stdin{Stdin: c.b}})
			}
			if err != nil {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// chunkReader is an io.ReadCloser over a server stream's data frames.
type chunkReader struct {
	cancel func()
	frameReader
}

// newChunkReader reads the frames next returns; cancel ends the stream.
func newChunkReader(ctx context.Context, op string, next func() ([]byte, error), cancel func()) *chunkReader {
	r := &chunkReader{cancel: cancel}
	r.frameReader.next = func() ([]byte, error) {
		b, err := next()
		if err != nil && !errors.Is(err, io.EOF) {
			err = fromWire(ctx, op, err)
		}
		return b, err
	}
	return r
}

func (r *chunkReader) Close() error {
	r.cancel()
	return nil
}

// serverStream is what ProcessLogs, ReadFile and WriteTar's streams have in common.
type serverStream[T any] interface {
	Receive() bool
	Msg() *T
	Err() error
	Close() error
}

// recvNext returns the next message of st; io.EOF at its clean end.
func recvNext[T any](st serverStream[T]) (*T, error) {
	if st.Receive() {
		return st.Msg(), nil
	}
	if err := st.Err(); err != nil {
		return nil, err
	}
	return nil, io.EOF
}

// openStream receives a server stream's first frame, which says the source
// opened (or carries its error).
func openStream[T any](ctx context.Context, op string, st serverStream[T], cancel context.CancelFunc) (*T, error) {
	first, err := recvNext(st)
	if err != nil {
		cancel()
		st.Close()
		if errors.Is(err, io.EOF) {
			err = errors.New("the stream ended before it opened")
		}
		return nil, fromWire(ctx, op, err)
	}
	return first, nil
}

// ProcessLogs streams a background process's log from offset.
func (c *Client) ProcessLogs(ctx context.Context, id, procID, stream string, offset int64) (io.ReadCloser, error) {
	const op = "ProcessLogs"
	sctx, cancel := context.WithCancel(ctx)
	st, err := c.rpc.ProcessLogs(sctx, connect.NewRequest(&noderpcpb.LogsRequest{Sandbox: id, Process: procID, Stream: stream, Offset: offset}))
	if err != nil {
		cancel()
		return nil, fromWire(ctx, op, err)
	}
	if _, err := openStream[noderpcpb.Chunk](ctx, op, st, cancel); err != nil {
		return nil, err
	}
	return newChunkReader(ctx, op, func() ([]byte, error) {
		m, err := recvNext[noderpcpb.Chunk](st)
		return m.GetData(), err
	}, func() { cancel(); st.Close() }), nil
}
