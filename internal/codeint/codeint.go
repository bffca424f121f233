// Package codeint is dsec's code interpreter: a service in the sandbox
// (server.py, with jskernel.js for JavaScript and TypeScript, rkernel.R
// for R and JavaKernel.java, on JShell, for Java) that runs cells
// in persistent Jupyter kernels and speaks E2B's interpreter protocol on Port
// (/execute, /contexts, /health), and the client the front ends reach it with
// through session.Service.Dial. The E2B front end starts the service when it
// creates a sandbox of the code-interpreter-v1 template; /v1's code:run
// starts it in any sandbox on first use (Client.Ensure). The sandbox's image
// must have python3 with ipykernel and jupyter_client (the
// code-interpreter-v1 image has them; scripts/codeint-image.sh).
package codeint

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	pathpkg "path"
	"strings"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Port is the port the service listens on in the sandbox (E2B's).
const Port = 49999

// ServiceName names the service (process labels, error messages).
const ServiceName = "code-interpreter"

// StartTimeout bounds the service's start, its first kernels included.
const StartTimeout = 90 * time.Second

// Paths of the service's files in the sandbox.
const (
	ServerPath     = "/opt/dsec/codeint/server.py"
	JSKernelPath   = "/opt/dsec/codeint/jskernel.js"
	RKernelPath    = "/opt/dsec/codeint/rkernel.R"
	JavaKernelPath = "/opt/dsec/codeint/JavaKernel.java"
)

//go:embed server.py
var serverPy []byte

//go:embed jskernel.js
var jsKernel []byte

//go:embed rkernel.R
var rKernel []byte

//go:embed JavaKernel.java
var javaKernel []byte

// Files are the service's files: path in the sandbox -> content.
func Files() map[string][]byte {
	return map[string][]byte{ServerPath: serverPy, JSKernelPath: jsKernel, RKernelPath: rKernel, JavaKernelPath: javaKernel}
}

// Command is the request that starts the service, supervised (it is started
// again if it dies), as root in /home/user as on E2B; env is passed on to the
// kernels.
func Command(env map[string]string) api.ExecRequest {
	e := map[string]string{}
	for k, v := range env {
		e[k] = v
	}
	e["DSEC_CODEINT_CWD"] = "/home/user"
	e["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
	e["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
	return api.ExecRequest{
		Cmd:  []string{"python3", "-Xfrozen_modules=off", ServerPath, "--supervise"},
		User: "root",
		Cwd:  "/home/user",
		Env:  e,
	}
}

// WriteFiles writes files into sandbox id.
func WriteFiles(ctx context.Context, svc session.Service, id string, files map[string][]byte) error {
	fs, err := svc.FS(ctx, id)
	if err != nil {
		return err
	}
	defer fs.Close()
	for path, content := range files {
		dir := pathpkg.Dir(path)
		if _, err := fs.Mkdir(ctx, dir, 0o755, true); err != nil && !errdefs.Is(err, api.CodeAlreadyExists) {
			return fmt.Errorf("mkdir %s: %w", dir, err)
		}
		if _, err := fs.WriteFile(ctx, path, 0o644, bytes.NewReader(content), int64(len(content))); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}

// Client reaches the interpreter service of sandboxes through svc.
type Client struct {
	svc    session.Service
	stream *http.Client // cells: no overall timeout (the caller's context bounds them)

	mu       sync.Mutex
	starting map[string]*start // sandbox id -> the start in flight
}

type start struct {
	done chan struct{}
	err  error
}

// NewClient returns a client over svc.
func NewClient(svc session.Service) *Client {
	// No keep-alive: a connection dialed under one call's context is not
	// reused by another.
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return session.DialProxyAddr(ctx, svc, addr)
		}}
	return &Client{svc: svc, stream: &http.Client{Transport: tr}, starting: map[string]*start{}}
}

func url(id, path string) string { return "http://" + session.ProxyHost(id, Port) + path }

// Healthy reports whether the service answers its health check in sandbox id.
func (c *Client) Healthy(ctx context.Context, id string) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url(id, "/health"), nil)
	if err != nil {
		return false
	}
	resp, err := c.stream.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Ensure starts the service in sandbox id unless it serves already, and waits
// until it does. Concurrent calls for one sandbox share one start.
func (c *Client) Ensure(ctx context.Context, id string) error {
	if c.Healthy(ctx, id) {
		return nil
	}
	c.mu.Lock()
	s, ok := c.starting[id]
	if !ok {
		s = &start{done: make(chan struct{})}
		c.starting[id] = s
		go func() {
			// Detached from the first caller: a caller that leaves does not
			// cut the start short for the others.
			sctx, cancel := context.WithTimeout(session.WithoutStep(context.WithoutCancel(ctx)), StartTimeout)
			defer cancel()
			s.err = c.start(sctx, id)
			c.mu.Lock()
			delete(c.starting, id)
			c.mu.Unlock()
			close(s.done)
		}()
	}
	c.mu.Unlock()
	select {
	case <-s.done:
		return s.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Client) start(ctx context.Context, id string) error {
	if err := WriteFiles(ctx, c.svc, id, Files()); err != nil {
		return fmt.Errorf("%s: %w", ServiceName, err)
	}
	req := Command(nil)
	req.Labels = map[string]string{"dsec.codeint": ServiceName}
	p, err := c.svc.StartProcess(ctx, id, req)
	if err != nil {
		if errdefs.Is(err, api.CodeNotFound) || errdefs.Is(err, api.CodeSandboxGone) || errdefs.Is(err, api.CodeConflict) {
			return fmt.Errorf("start %s: %w", ServiceName, err)
		}
		return errdefs.Wrap(api.CodeUnavailable, err, "start %s (the image needs python3 with ipykernel)", ServiceName)
	}
	return c.Await(ctx, id, p.ID)
}

// Await polls the service's health until it answers, the process procID ends
// (an error with the end of its stderr; unless another instance serves) or
// ctx ends.
func (c *Client) Await(ctx context.Context, id, procID string) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if c.Healthy(ctx, id) {
			return nil
		}
		if p, err := c.svc.GetProcess(ctx, id, procID); err == nil && !p.Running {
			if c.Healthy(ctx, id) {
				return nil
			}
			return errdefs.New(api.CodeUnavailable, "%s exited before serving%s", ServiceName, ProcessTail(ctx, c.svc, id, procID))
		}
		select {
		case <-ctx.Done():
			return errdefs.New(api.CodeUnavailable, "%s did not serve on port %d in time", ServiceName, Port)
		case <-tick.C:
		}
	}
}

// ProcessTail is ": " and the last KiB of a process's stderr, for an error
// message ("" when there is none).
func ProcessTail(ctx context.Context, svc session.Service, id, procID string) string {
	rc, err := svc.ProcessLogs(ctx, id, procID, "stderr", 0)
	if err != nil {
		return ""
	}
	defer rc.Close()
	b, _ := io.ReadAll(io.LimitReader(rc, 1<<20))
	if len(b) > 1024 {
		b = b[len(b)-1024:]
	}
	if len(b) == 0 {
		return ""
	}
	return ": " + string(bytes.TrimSpace(b))
}

// ExecuteRequest is one cell for POST /execute.
type ExecuteRequest struct {
	Code      string            `json:"code"`
	Language  string            `json:"language,omitempty"`
	ContextID string            `json:"context_id,omitempty"`
	EnvVars   map[string]string `json:"env_vars,omitempty"`
}

// Execute runs a cell in sandbox id and returns the service's NDJSON output
// (one event a line, ending with {"type":"end_of_execution"}). Closing it, or
// ending ctx, interrupts the cell. The service's refusals are classified:
// 400 invalid_argument, 404 not_found; an unreachable service unavailable.
func (c *Client) Execute(ctx context.Context, id string, r ExecuteRequest) (io.ReadCloser, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return nil, errdefs.Internal(err, "encoding the cell")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url(id, "/execute"), bytes.NewReader(body))
	if err != nil {
		return nil, errdefs.Internal(err, "execute request")
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.stream.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errdefs.CodeOf(err) == api.CodeNotFound || errdefs.CodeOf(err) == api.CodeSandboxGone {
			return nil, err
		}
		return nil, errdefs.Wrap(api.CodeUnavailable, err, "%s in sandbox %s", ServiceName, id)
	}
	if resp.StatusCode == http.StatusOK {
		return resp.Body, nil
	}
	defer resp.Body.Close()
	return nil, refusal(resp)
}

// refusal classifies a non-200 answer of the service: 400 invalid_argument,
// 404 not_found, others unavailable; the message is the service's text.
func refusal(resp *http.Response) error {
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	text := strings.TrimSpace(string(msg))
	switch resp.StatusCode {
	case http.StatusBadRequest:
		return errdefs.New(api.CodeInvalidArgument, "%s", text)
	case http.StatusNotFound:
		return errdefs.New(api.CodeNotFound, "%s", text)
	default:
		return errdefs.New(api.CodeUnavailable, "%s answered %d: %s", ServiceName, resp.StatusCode, text)
	}
}

// call sends one request to the service in sandbox id (body JSON-encoded
// unless nil) and decodes its JSON answer into out (unless nil); refusals
// are classified as Execute's are.
func (c *Client) call(ctx context.Context, id, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return errdefs.Internal(err, "encoding the request")
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url(id, path), rd)
	if err != nil {
		return errdefs.Internal(err, "%s request", path)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.stream.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errdefs.CodeOf(err) == api.CodeNotFound || errdefs.CodeOf(err) == api.CodeSandboxGone {
			return err
		}
		return errdefs.Wrap(api.CodeUnavailable, err, "%s in sandbox %s", ServiceName, id)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return refusal(resp)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(out); err != nil {
		return errdefs.Wrap(api.CodeUnavailable, err, "%s: decoding its answer to %s %s", ServiceName, method, path)
	}
	return nil
}

// Contexts lists the contexts (kernels) of the service in sandbox id.
func (c *Client) Contexts(ctx context.Context, id string) ([]api.CodeContext, error) {
	var list []api.CodeContext
	if err := c.call(ctx, id, http.MethodGet, "/contexts", nil, &list); err != nil {
		return nil, err
	}
	if list == nil {
		list = []api.CodeContext{}
	}
	return list, nil
}

// CreateContext starts a context (a kernel of its own) in sandbox id.
func (c *Client) CreateContext(ctx context.Context, id string, r api.CreateCodeContextRequest) (api.CodeContext, error) {
	var cc api.CodeContext
	err := c.call(ctx, id, http.MethodPost, "/contexts", r, &cc)
	return cc, err
}

// RestartContext replaces context cid's kernel by a fresh one (same id).
func (c *Client) RestartContext(ctx context.Context, id, cid string) error {
	return c.call(ctx, id, http.MethodPost, "/contexts/"+neturl.PathEscape(cid)+"/restart", nil, nil)
}

// RemoveContext ends context cid and its kernel.
func (c *Client) RemoveContext(ctx context.Context, id, cid string) error {
	return c.call(ctx, id, http.MethodDelete, "/contexts/"+neturl.PathEscape(cid), nil, nil)
}
