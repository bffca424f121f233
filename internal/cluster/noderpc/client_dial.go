package noderpc

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/dsec-dev/dsec/internal/cluster/noderpc/noderpcpb"
)

// Dial connects to a TCP port inside sandbox id on the node. As with
// net.Dialer.DialContext, ctx bounds the connecting only; the connection lives
// until it is closed, the sandbox's side closes, or the node's connection drops.
// Its deadlines work as net.Pipe's do.
func (c *Client) Dial(ctx context.Context, id string, port int) (net.Conn, error) {
	const op = "Dial"
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	st := c.rpc.Dial(sctx)
	// As in ExecStream: closing the response ends a pending Receive.
	context.AfterFunc(sctx, func() { _ = st.CloseResponse() })
	fail := func(err error) (net.Conn, error) {
		cancel()
		_ = st.CloseResponse()
		return nil, fromWire(ctx, op, err)
	}
	start := &noderpcpb.DialStart{Sandbox: id, Port: int32(port)}
	if err := st.Send(&noderpcpb.DialInput{Frame: &noderpcpb.DialInput_Start{Start: start}}); err != nil && !errors.Is(err, io.EOF) {
		return fail(err)
	}
	connected := make(chan error, 1)
	go func() {
		m, err := st.Receive()
		if err == nil && !m.GetConnected() {
			err = errors.New("the node's first frame is not connected")
		}
		if errors.Is(err, io.EOF) {
			err = errors.New("the stream ended before it connected")
		}
		connected <- err
	}()
	select {
	case err := <-connected:
		if err != nil {
			return fail(err)
		}
	case <-ctx.Done():
		cancel()
		<-connected
		return fail(ctx.Err())
	}
	local, remote := net.Pipe()
	// Node → caller: frames are written into the pipe; the node's end of the
	// stream closes it.
	go func() {
		defer remote.Close()
		for {
			m, err := st.Receive()
			if err != nil {
				return
			}
			if _, err := remote.Write(m.GetData()); err != nil {
				return
			}
		}
	}()
	// Caller → node: what the caller writes is sent; the caller's Close (the
	// pipe's EOF) ends the stream.
	go func() {
		defer cancel()
		buf := make([]byte, chunkSize)
		for {
			n, err := remote.Read(buf)
			if n > 0 {
				if st.Send(&noderpcpb.DialInput{Frame: &noderpcpb.DialInput_Data{Data: buf[:n]}}) != nil {
					remote.Close()
					return
				}
			}
			if err != nil {
				_ = st.CloseRequest()
				_ = st.CloseResponse()
				return
			}
		}
	}()
	return local, nil
}
