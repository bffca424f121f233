package noderpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"connectrpc.com/connect"

	"github.com/dsec-dev/dsec/internal/cluster/noderpc/noderpcpb"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// FS checks that sandbox id's file system opens on the node and returns it;
// each of its operations is one call (content streams in chunks).
func (c *Client) FS(ctx context.Context, id string) (session.FS, error) {
	if err := c.call(ctx, "FSOpen", callArgs{ID: id}, nil); err != nil {
		return nil, err
	}
	return &remoteFS{c: c, id: id}, nil
}

// remoteFS is a sandbox's file system on a node. It holds nothing on the node
// between calls, so Close has nothing to release.
type remoteFS struct {
	c  *Client
	id string
}

func (f *remoteFS) Close() error { return nil }

func (f *remoteFS) Stat(ctx context.Context, path string) (api.FileInfo, error) {
	return callFor[api.FileInfo](ctx, f.c, "Stat", callArgs{ID: f.id, Path: path})
}

func (f *remoteFS) List(ctx context.Context, path string) ([]api.FileInfo, error) {
	return callFor[[]api.FileInfo](ctx, f.c, "ListFiles", callArgs{ID: f.id, Path: path})
}

func (f *remoteFS) Mkdir(ctx context.Context, path string, mode os.FileMode, parents bool) (api.FileInfo, error) {
	return callFor[api.FileInfo](ctx, f.c, "Mkdir", callArgs{ID: f.id, Path: path, Mode: uint32(mode), Parents: parents})
}

func (f *remoteFS) Remove(ctx context.Context, path string, recursive bool) error {
	return f.c.call(ctx, "Remove", callArgs{ID: f.id, Path: path, Recursive: recursive}, nil)
}

func (f *remoteFS) Rename(ctx context.Context, from, to string) error {
	return f.c.call(ctx, "Rename", callArgs{ID: f.id, Path: from, To: to}, nil)
}

// Open streams a file's content; the reader lives as long as ctx.
func (f *remoteFS) Open(ctx context.Context, path string) (io.ReadCloser, api.FileInfo, error) {
	const op = "Open"
	sctx, cancel := context.WithCancel(ctx)
	st, err := f.c.rpc.ReadFile(sctx, connect.NewRequest(&noderpcpb.FileRequest{Sandbox: f.id, Path: path}))
	if err != nil {
		cancel()
		return nil, api.FileInfo{}, fromWire(ctx, op, err)
	}
	first, err := openStream[noderpcpb.FileChunk](ctx, op, st, cancel)
	if err != nil {
		return nil, api.FileInfo{}, err
	}
	var info api.FileInfo
	if err := json.Unmarshal(first.GetInfo(), &info); err != nil {
		cancel()
		st.Close()
		return nil, api.FileInfo{}, errdefs.Wrap(api.CodeInternal, err, "node rpc %s: decoding file info", op)
	}
	return newChunkReader(ctx, op, func() ([]byte, error) {
		m, err := recvNext[noderpcpb.FileChunk](st)
		return m.GetData(), err
	}, func() { cancel(); st.Close() }), info, nil
}

// WriteTar streams path's tar from the node into w.
func (f *remoteFS) WriteTar(ctx context.Context, path string, w io.Writer) error {
	const op = "WriteTar"
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := f.c.rpc.WriteTar(sctx, connect.NewRequest(&noderpcpb.FileRequest{Sandbox: f.id, Path: path}))
	if err != nil {
		return fromWire(ctx, op, err)
	}
	defer st.Close()
	for st.Receive() {
		if _, err := w.Write(st.Msg().GetData()); err != nil {
			return err
		}
	}
	return fromWire(ctx, op, st.Err())
}

// WriteFile streams r's content (at most max bytes are kept) to the node.
func (f *remoteFS) WriteFile(ctx context.Context, path string, mode os.FileMode, r io.Reader, max int64) (api.FileInfo, error) {
	var info api.FileInfo
	err := f.upload(ctx, "WriteFile", f.c.rpc.WriteFile, &noderpcpb.WriteStart{Sandbox: f.id, Path: path, Mode: uint32(mode), Max: max}, r, &info)
	return info, err
}

// ExtractTar streams a tar from r to the node, which unpacks it into path.
func (f *remoteFS) ExtractTar(ctx context.Context, path string, r io.Reader) error {
	return f.upload(ctx, "ExtractTar", f.c.rpc.ExtractTar, &noderpcpb.WriteStart{Sandbox: f.id, Path: path}, r, nil)
}

// upload runs a client stream: the start frame, then r's content in chunks;
// out (if not nil) receives the node's JSON answer.
func (f *remoteFS) upload(ctx context.Context, op string,
	open func(context.Context) *connect.ClientStreamForClient[noderpcpb.WriteInput, noderpcpb.CallResponse],
	start *noderpcpb.WriteStart, r io.Reader, out any) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st := open(sctx)
	err := st.Send(&noderpcpb.WriteInput{Frame: &noderpcpb.WriteInput_Start{Start: start}})
	var readErr error
	if err == nil {
		buf := make([]byte, chunkSize)
		for {
			n, rerr := r.Read(buf)
			if n > 0 {
				if err = st.Send(&noderpcpb.WriteInput{Frame: &noderpcpb.WriteInput_Data{Data: buf[:n]}}); err != nil {
					break // io.EOF: the node answered early; CloseAndReceive says how
				}
			}
			if rerr != nil {
				if !errors.Is(rerr, io.EOF) {
					readErr = rerr
				}
				break
			}
		}
	}
	if readErr != nil {
		cancel()
		_, _ = st.CloseAndReceive()
		return fmt.Errorf("node rpc %s: reading the content: %w", op, readErr)
	}
	resp, err := st.CloseAndReceive()
	if err != nil {
		return fromWire(ctx, op, err)
	}
	if out != nil {
		if err := json.Unmarshal(resp.Msg.GetResult(), out); err != nil {
			return errdefs.Wrap(api.CodeInternal, err, "node rpc %s: decoding the answer", op)
		}
	}
	return nil
}
