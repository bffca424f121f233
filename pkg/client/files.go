package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/dsec-dev/dsec/pkg/api"
)

func fileCall(method, id, sub, path string) call {
	return call{method: method, path: sandboxPath(id, "/files", sub), query: url.Values{"path": {path}},
		retry: method == http.MethodGet}
}

// ReadFile downloads a regular file; the caller closes the reader.
func (c *Client) ReadFile(ctx context.Context, id, path string) (io.ReadCloser, error) {
	resp, err := c.send(ctx, fileCall(http.MethodGet, id, "", path))
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// WriteFile creates or replaces path with r's content; mode holds the permission
// bits (0o644; 0 means 0644). It is never retried: r is consumed.
func (c *Client) WriteFile(ctx context.Context, id, path string, mode uint32, r io.Reader) (api.FileInfo, error) {
	cl := fileCall(http.MethodPut, id, "", path)
	if mode != 0 {
		cl.query.Set("mode", fmt.Sprintf("%04o", mode))
	}
	cl.body, cl.ctype = nonNil(r), "application/octet-stream"
	var info api.FileInfo
	err := c.do(ctx, cl, &info)
	return info, err
}

// nonNil turns a nil body into an empty one.
func nonNil(r io.Reader) io.Reader {
	if r == nil {
		return http.NoBody
	}
	return r
}

// Mkdir creates a directory.
func (c *Client) Mkdir(ctx context.Context, id string, req api.MkdirRequest) error {
	return c.do(ctx, call{method: http.MethodPost, path: sandboxPath(id, "/files/mkdir"), json: req}, nil)
}

// ListFiles lists a directory, sorted by name.
func (c *Client) ListFiles(ctx context.Context, id, path string) ([]api.FileInfo, error) {
	var out api.ListFilesResponse
	err := c.do(ctx, fileCall(http.MethodGet, id, "/list", path), &out)
	return out.Files, err
}

// Stat describes path without following a final symlink.
func (c *Client) Stat(ctx context.Context, id, path string) (api.FileInfo, error) {
	var info api.FileInfo
	err := c.do(ctx, fileCall(http.MethodGet, id, "/stat", path), &info)
	return info, err
}

// Remove removes a file or an empty directory, or a whole tree when recursive.
func (c *Client) Remove(ctx context.Context, id, path string, recursive bool) error {
	cl := fileCall(http.MethodDelete, id, "", path)
	if recursive {
		cl.query.Set("recursive", "true")
	}
	return c.do(ctx, cl, nil)
}

// DownloadTar downloads path (a file or a tree) as an uncompressed tar; the caller
// closes the reader.
func (c *Client) DownloadTar(ctx context.Context, id, path string) (io.ReadCloser, error) {
	resp, err := c.send(ctx, fileCall(http.MethodGet, id, "/archive", path))
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// UploadTar extracts a tar (plain or gzip) into directory path.
func (c *Client) UploadTar(ctx context.Context, id, path string, r io.Reader) error {
	cl := fileCall(http.MethodPut, id, "/archive", path)
	cl.body, cl.ctype = nonNil(r), "application/x-tar"
	return c.do(ctx, cl, nil)
}
