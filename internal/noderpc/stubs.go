package noderpc

import (
	"context"
	"io"
	"net"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

func notYet(what string) error {
	return errdefs.New(api.CodeNotImplemented, "node rpc: %s is not implemented yet", what)
}

func (c *Client) ExecStream(ctx context.Context, id string, req api.ExecRequest, s session.Stream) (api.ExecResult, error) {
	return api.ExecResult{}, notYet("ExecStream")
}

func (c *Client) ProcessLogs(ctx context.Context, id, procID, stream string, offset int64) (io.ReadCloser, error) {
	return nil, notYet("ProcessLogs")
}

func (c *Client) FS(ctx context.Context, id string) (session.FS, error) {
	return nil, notYet("FS")
}

func (c *Client) Dial(ctx context.Context, id string, port int) (net.Conn, error) {
	return nil, notYet("Dial")
}

func (c *Client) HTTP(ctx context.Context, id string, port int, req session.HTTPRequest) (session.HTTPResponse, error) {
	return session.HTTPResponse{}, notYet("HTTP")
}
