package noderpc

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"

	"connectrpc.com/connect"

	"github.com/dsec-dev/dsec/internal/cluster/noderpc/noderpcpb"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// ExecStream runs a streaming exec: stdin and control frames from the client
// feed the process, its output goes back as frames, the exit frame ends it.
func (h *handler) ExecStream(ctx context.Context, st *connect.BidiStream[noderpcpb.ExecInput, noderpcpb.ExecOutput]) error {
	first, err := st.Receive()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return toWire(errdefs.Invalid("node rpc ExecStream: the first frame must be the start"))
	}
	var req api.ExecRequest
	if err := json.Unmarshal(start.GetRequest(), &req); err != nil {
		return toWire(errdefs.Invalid("node rpc ExecStream: decoding the request: %v", err))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := newOutQueue(st.Send)
	defer out.close()
	ctl := make(chan session.Control)
	sio := session.Stream{
		Stdout: out.writer(func(b []byte) *noderpcpb.ExecOutput {
			return &noderpcpb.ExecOutput{Frame: &noderpcpb.ExecOutput_Stdout{Stdout: b}}
		}),
		Stderr: out.writer(func(b []byte) *noderpcpb.ExecOutput {
			return &noderpcpb.ExecOutput{Frame: &noderpcpb.ExecOutput_Stderr{Stderr: b}}
		}),
		Control: ctl,
		Started: func(pid int) {
			_ = out.put(&noderpcpb.ExecOutput{Frame: &noderpcpb.ExecOutput_StartedPid{StartedPid: int64(pid)}})
		},
	}
	var stdinW *io.PipeWriter
	if !start.GetNoStdin() {
		var stdinR *io.PipeReader
		stdinR, stdinW = io.Pipe()
		defer stdinR.Close()
		sio.Stdin = stdinR
	}
	go h.execInput(ctx, st, stdinW, ctl)
	res, err := h.svc.ExecStream(ctx, start.GetSandbox(), req, sio)
	if err != nil {
		return toWire(err)
	}
	b, err := json.Marshal(res)
	if err != nil {
		return toWire(errdefs.Internal(err, "node rpc ExecStream: encoding the result"))
	}
	if err := out.put(&noderpcpb.ExecOutput{Frame: &noderpcpb.ExecOutput_Exit{Exit: b}}); err != nil {
		return err
	}
	return out.close()
}

// execInput pumps a streaming exec's input frames into its stdin pipe and its
// control channel until the client's side ends or ctx does.
func (h *handler) execInput(ctx context.Context, st *connect.BidiStream[noderpcpb.ExecInput, noderpcpb.ExecOutput], stdin *io.PipeWriter, ctl chan<- session.Control) {
	closeStdin := func(err error) {
		if stdin != nil {
			stdin.CloseWithError(err)
			stdin = nil
		}
	}
	defer func() { closeStdin(io.EOF) }()
	for {
		m, err := st.Receive()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				closeStdin(err)
			}
			return
		}
		var c session.Control
		switch f := m.GetFrame().(type) {
		case *noderpcpb.ExecInput_Stdin:
			if stdin != nil {
				if _, err := stdin.Write(f.Stdin); err != nil {
					stdin = nil // the process closed its stdin; drop the rest
				}
			}
			continue
		case *noderpcpb.ExecInput_StdinEof:
			closeStdin(io.EOF)
			continue
		case *noderpcpb.ExecInput_Signal:
			c.Signal = int(f.Signal)
		case *noderpcpb.ExecInput_Resize:
			c.Resize = &api.TermSize{Cols: int(f.Resize.GetCols()), Rows: int(f.Resize.GetRows())}
		default:
			continue
		}
		select {
		case ctl <- c:
		case <-ctx.Done():
			return
		}
	}
}

// frameWriter sends what is written to it as frames of at most chunkSize.
type frameWriter func([]byte) error

func (f frameWriter) Write(p []byte) (int, error) {
	for off := 0; off < len(p); off += chunkSize {
		end := min(off+chunkSize, len(p))
		if err := f(p[off:end]); err != nil {
			return off, err
		}
	}
	return len(p), nil
}

// sendAll copies r to frames made by mk until EOF.
func sendAll(r io.Reader, send func([]byte) error) error {
	buf := make([]byte, chunkSize)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if serr := send(buf[:n:n]); serr != nil {
				return serr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// ProcessLogs streams a background process's log: an opened frame, then data.
func (h *handler) ProcessLogs(ctx context.Context, req *connect.Request[noderpcpb.LogsRequest], st *connect.ServerStream[noderpcpb.Chunk]) error {
	m := req.Msg
	rc, err := h.svc.ProcessLogs(ctx, m.GetSandbox(), m.GetProcess(), m.GetStream(), m.GetOffset())
	if err != nil {
		return toWire(err)
	}
	defer rc.Close()
	if err := st.Send(&noderpcpb.Chunk{Opened: true}); err != nil {
		return err
	}
	return toWire(sendAll(rc, func(b []byte) error { return st.Send(&noderpcpb.Chunk{Data: b}) }))
}

// ReadFile streams a file: its info, then its content.
func (h *handler) ReadFile(ctx context.Context, req *connect.Request[noderpcpb.FileRequest], st *connect.ServerStream[noderpcpb.FileChunk]) error {
	return toWire(h.withFS(ctx, req.Msg.GetSandbox(), func(fs session.FS) error {
		rc, info, err := fs.Open(ctx, req.Msg.GetPath())
		if err != nil {
			return err
		}
		defer rc.Close()
		b, err := json.Marshal(info)
		if err != nil {
			return errdefs.Internal(err, "encoding file info")
		}
		if err := st.Send(&noderpcpb.FileChunk{Info: b}); err != nil {
			return err
		}
		return sendAll(rc, func(b []byte) error { return st.Send(&noderpcpb.FileChunk{Data: b}) })
	}))
}

// WriteTar streams a tar of a path.
func (h *handler) WriteTar(ctx context.Context, req *connect.Request[noderpcpb.FileRequest], st *connect.ServerStream[noderpcpb.Chunk]) error {
	return toWire(h.withFS(ctx, req.Msg.GetSandbox(), func(fs session.FS) error {
		return fs.WriteTar(ctx, req.Msg.GetPath(), frameWriter(func(b []byte) error { return st.Send(&noderpcpb.Chunk{Data: b}) }))
	}))
}

// WriteFile writes a file from the client's data frames.
func (h *handler) WriteFile(ctx context.Context, st *connect.ClientStream[noderpcpb.WriteInput]) (*connect.Response[noderpcpb.CallResponse], error) {
	start, r, err := writeStart(st)
	if err != nil {
		return nil, toWire(err)
	}
	var info api.FileInfo
	err = h.withFS(ctx, start.GetSandbox(), func(fs session.FS) error {
		info, err = fs.WriteFile(ctx, start.GetPath(), os.FileMode(start.GetMode()), r, start.GetMax())
		return err
	})
	if err != nil {
		return nil, toWire(err)
	}
	b, err := json.Marshal(info)
	if err != nil {
		return nil, toWire(errdefs.Internal(err, "encoding file info"))
	}
	return connect.NewResponse(&noderpcpb.CallResponse{Result: b}), nil
}

// ExtractTar unpacks the client's data frames (a tar stream) into a directory.
func (h *handler) ExtractTar(ctx context.Context, st *connect.ClientStream[noderpcpb.WriteInput]) (*connect.Response[noderpcpb.CallResponse], error) {
	start, r, err := writeStart(st)
	if err != nil {
		return nil, toWire(err)
	}
	err = h.withFS(ctx, start.GetSandbox(), func(fs session.FS) error { return fs.ExtractTar(ctx, start.GetPath(), r) })
	if err != nil {
		return nil, toWire(err)
	}
	return connect.NewResponse(&noderpcpb.CallResponse{}), nil
}

// writeStart reads a client stream's start frame and returns a reader of the
// data frames that follow.
func writeStart(st *connect.ClientStream[noderpcpb.WriteInput]) (*noderpcpb.WriteStart, io.Reader, error) {
	if !st.Receive() {
		if err := st.Err(); err != nil {
			return nil, nil, err
		}
		return nil, nil, errdefs.Invalid("node rpc: no start frame")
	}
	start := st.Msg().GetStart()
	if start == nil {
		return nil, nil, errdefs.Invalid("node rpc: the first frame must be the start")
	}
	return start, &frameReader{next: func() ([]byte, error) {
		if !st.Receive() {
			if err := st.Err(); err != nil {
				return nil, err
			}
			return nil, io.EOF
		}
		return st.Msg().GetData(), nil
	}}, nil
}

// frameReader reads the data of a sequence of frames.
type frameReader struct {
	next func() ([]byte, error)
	buf  []byte
	err  error
}

func (r *frameReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		r.buf, r.err = r.next()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// Dial connects to a port in a sandbox and pumps bytes both ways until either
// side ends.
func (h *handler) Dial(ctx context.Context, st *connect.BidiStream[noderpcpb.DialInput, noderpcpb.DialOutput]) error {
	first, err := st.Receive()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return toWire(errdefs.Invalid("node rpc Dial: the first frame must be the start"))
	}
	conn, err := h.svc.Dial(ctx, start.GetSandbox(), int(start.GetPort()))
	if err != nil {
		return toWire(err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if err := st.Send(&noderpcpb.DialOutput{Connected: true}); err != nil {
		return err
	}
	go func() {
		for {
			m, err := st.Receive()
			if err != nil {
				if cw, ok := conn.(interface{ CloseWrite() error }); ok && errors.Is(err, io.EOF) {
					_ = cw.CloseWrite()
				} else {
					conn.Close()
				}
				return
			}
			if _, err := conn.Write(m.GetData()); err != nil {
				conn.Close()
				return
			}
		}
	}()
	err = sendAll(conn, func(b []byte) error { return st.Send(&noderpcpb.DialOutput{Data: b}) })
	if err != nil && ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
		return toWire(errdefs.Wrap(api.CodeBadGateway, err, "sandbox connection"))
	}
	return nil
}
