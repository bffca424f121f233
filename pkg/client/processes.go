package client

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

func processPath(id, pid string, rest ...string) string {
	return sandboxPath(id, append([]string{"/processes/", esc(pid)}, rest...)...)
}

// StartProcess starts a background process. With req.TTY it runs on a terminal
// of req.Cols x req.Rows and all its output is the "stdout" log.
func (c *Client) StartProcess(ctx context.Context, id string, req api.ExecRequest) (api.Process, error) {
	var p api.Process
	err := c.do(ctx, call{method: http.MethodPost, path: sandboxPath(id, "/processes"), json: req}, &p)
	return p, err
}

// ListProcesses lists a sandbox's background processes.
func (c *Client) ListProcesses(ctx context.Context, id string) ([]api.Process, error) {
	var out api.ListProcessesResponse
	err := c.do(ctx, call{method: http.MethodGet, path: sandboxPath(id, "/processes"), retry: true}, &out)
	return out.Processes, err
}

// GetProcess describes a background process.
func (c *Client) GetProcess(ctx context.Context, id, pid string) (api.Process, error) {
	var p api.Process
	err := c.do(ctx, call{method: http.MethodGet, path: processPath(id, pid), retry: true}, &p)
	return p, err
}

// WaitProcess waits until the process exited or timeout passed (then it returns the
// still-running process and no error); timeout 0 waits as long as ctx allows.
func (c *Client) WaitProcess(ctx context.Context, id, pid string, timeout time.Duration) (api.Process, error) {
	q := url.Values{}
	if timeout > 0 {
		q.Set("timeout_ms", itoa(max(1, timeout.Milliseconds())))
	}
	var p api.Process
	err := c.do(ctx, call{method: http.MethodPost, path: processPath(id, pid, "/wait"), query: q}, &p)
	return p, err
}

// KillProcess sends signal ("SIGTERM", "TERM", "15"; empty means SIGKILL) to the
// process's group.
func (c *Client) KillProcess(ctx context.Context, id, pid, signal string) error {
	return c.do(ctx, call{method: http.MethodPost, path: processPath(id, pid, "/kill"),
		json: api.KillRequest{Signal: signal}}, nil)
}

// ProcessLogs reads a background process's "stdout" or "stderr" from offset on;
// the caller closes the reader.
func (c *Client) ProcessLogs(ctx context.Context, id, pid, stream string, offset int64) (io.ReadCloser, error) {
	q := url.Values{"stream": {stream}, "offset": {itoa(offset)}}
	resp, err := c.send(ctx, call{method: http.MethodGet, path: processPath(id, pid, "/logs"), query: q, retry: true})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// FollowProcess answers with a background process's output past req's offsets
// as soon as there is some, or the process has ended (Ended: nothing more will
// come), or req.WaitMs has passed.
func (c *Client) FollowProcess(ctx context.Context, id, pid string, req api.FollowRequest) (api.ProcessOutput, error) {
	q := url.Values{"stdout_offset": {itoa(req.StdoutOffset)}, "stderr_offset": {itoa(req.StderrOffset)},
		"wait_ms": {itoa(req.WaitMs)}, "max_bytes": {itoa(int64(req.MaxBytes))}}
	var out api.ProcessOutput
	err := c.do(ctx, call{method: http.MethodGet, path: processPath(id, pid, "/output"), query: q, retry: true}, &out)
	return out, err
}
