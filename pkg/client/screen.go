package client

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/dsec-dev/dsec/pkg/api"
)

// maxScreenshot bounds a screenshot's PNG (a 16384x16384 RGBA display).
const maxScreenshot = 1 << 30

// Screenshot returns what sandbox id's display shows, as a PNG (fullvm).
func (c *Client) Screenshot(ctx context.Context, id string) ([]byte, error) {
	resp, err := c.send(ctx, call{method: http.MethodGet, path: sandboxPath(id, "/screen"), retry: true})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxScreenshot+1))
	if err != nil {
		return nil, fmt.Errorf("dsec client: reading the screenshot: %w", err)
	}
	if len(b) > maxScreenshot {
		return nil, fmt.Errorf("dsec client: screenshot over %d bytes", maxScreenshot)
	}
	return b, nil
}

// SendInput sends keyboard or mouse input to sandbox id's display (fullvm):
// exactly one of req.Text, req.Key, req.Click.
func (c *Client) SendInput(ctx context.Context, id string, req api.InputRequest) (api.InputResult, error) {
	var out api.InputResult
	err := c.do(ctx, call{method: http.MethodPost, path: sandboxPath(id, "/input"), json: req}, &out)
	return out, err
}
