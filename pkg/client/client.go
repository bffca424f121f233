// Package client is the Go client of dsec's HTTP API (/v1); the dsec CLI uses it.
//
// Errors: a response with a non-2xx status becomes an *api.Error with Status set
// (find it with api.AsError or errors.As). A request that never got a response
// (connection refused, reset, DNS failure) becomes an *api.Error with Code
// "unavailable", Infrastructure and Retryable set, that also wraps the transport
// error, so errors.As finds both; a cancelled or expired ctx is returned as is.
//
// Retries: only safe operations are retried, with exponential backoff and jitter,
// on errors marked Retryable: every GET, and Create, which always carries a request
// ID (one is generated when the caller gives none) so the server deduplicates it.
// Exec, file writes, signals and the other non-idempotent calls are never retried.
//
// A Client is safe for concurrent use and keeps a pool of connections; create one
// and share it.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// Defaults.
const (
	DefaultAddr    = "http://127.0.0.1:7070"
	DefaultDataDir = "/var/lib/dsec"
	// DefaultRetries is how many times a safe request is retried.
	DefaultRetries = 3

	maxErrorBody = 64 << 10
	errorHeader  = "X-Dsec-Error" // set by the server on its own errors
)

// Client talks to one dsec server.
type Client struct {
	addr    string
	token   string
	hc      *http.Client
	retries int
	// backoff returns the pause before retry number n (0-based); tests shorten it.
	backoff func(n int) time.Duration
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient uses hc instead of the client's own pooled transport. Its Timeout
// (if any) also bounds streaming calls, so leave it 0 and use contexts.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithRetry sets how many times safe requests are retried (0 disables retries).
func WithRetry(n int) Option {
	return func(c *Client) { c.retries = max(0, n) }
}

// New returns a client of the server at addr (e.g. "http://127.0.0.1:7070")
// authenticating with token.
func New(addr, token string, opts ...Option) *Client {
	c := &Client{
		addr:    strings.TrimRight(addr, "/"),
		token:   token,
		retries: DefaultRetries,
		backoff: backoff,
	}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		c.hc = &http.Client{Transport: newTransport()}
	}
	return c
}

// newTransport is sized for hundreds of parallel requests to one server.
func newTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 512
	t.IdleConnTimeout = 90 * time.Second
	watchConns(t)
	return t
}

// FromEnv returns a client configured by DSEC_ADDR (default DefaultAddr) and
// DSEC_TOKEN (default: the trimmed contents of $DSEC_DATA_DIR/token, DSEC_DATA_DIR
// defaulting to DefaultDataDir).
func FromEnv(opts ...Option) (*Client, error) {
	addr := os.Getenv("DSEC_ADDR")
	if addr == "" {
		addr = DefaultAddr
	}
	token := strings.TrimSpace(os.Getenv("DSEC_TOKEN"))
	if token == "" {
		dir := os.Getenv("DSEC_DATA_DIR")
		if dir == "" {
			dir = DefaultDataDir
		}
		b, err := os.ReadFile(filepath.Join(dir, "token"))
		if err != nil {
			return nil, fmt.Errorf("dsec client: DSEC_TOKEN is unset and the token file is unreadable: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	return New(addr, token, opts...), nil
}

// backoff is exponential from 100 ms, capped at 5 s, with full jitter.
func backoff(n int) time.Duration {
	d := 100 * time.Millisecond << min(n, 6)
	d = min(d, 5*time.Second)
	return d/2 + rand.N(d/2+1)
}

// call describes one request.
type call struct {
	method string
	path   string // already escaped
	query  url.Values
	json   any       // request body encoded as JSON, or
	body   io.Reader // a raw body (never retried)
	ctype  string
	header http.Header
	retry  bool // safe to repeat
}

// esc escapes one path segment.
func esc(s string) string { return url.PathEscape(s) }

func sandboxPath(id string, rest ...string) string {
	return "/v1/sandboxes/" + esc(id) + strings.Join(rest, "")
}

// send performs c, retrying when it is safe, and returns a 2xx response whose body
// the caller closes.
func (c *Client) send(ctx context.Context, cl call) (*http.Response, error) {
	var payload []byte
	if cl.json != nil {
		b, err := json.Marshal(cl.json)
		if err != nil {
			return nil, fmt.Errorf("dsec client: encoding request: %w", err)
		}
		payload, cl.ctype = b, "application/json"
	}
	for attempt := 0; ; attempt++ {
		body := cl.body
		if payload != nil {
			body = bytes.NewReader(payload)
		}
		resp, err := c.roundTrip(ctx, cl, body)
		if err == nil {
			return resp, nil
		}
		ae, ok := api.AsError(err)
		if !cl.retry || cl.body != nil || attempt >= c.retries || !ok || !ae.Retryable {
			return nil, err
		}
		t := time.NewTimer(c.backoff(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("dsec client: %w (after %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// roundTrip sends one request and turns transport failures and error statuses into
// errors.
func (c *Client) roundTrip(ctx context.Context, cl call, body io.Reader) (*http.Response, error) {
	u := c.addr + cl.path
	if len(cl.query) > 0 {
		u += "?" + cl.query.Encode()
	}
	body, rctx, end := guardBody(ctx, body)
	defer end() // once the answer is in, the server read what it needed
	req, err := http.NewRequestWithContext(rctx, cl.method, u, body)
	if err != nil {
		return nil, fmt.Errorf("dsec client: building request: %w", err)
	}
	for k, v := range cl.header {
		req.Header[k] = v
	}
	setStepHeaders(ctx, req.Header)
	if cl.ctype != "" {
		req.Header.Set("Content-Type", cl.ctype)
	}
	c.authorize(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, transportError(ctx, err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

func (c *Client) authorize(req *http.Request) {
	req.Header.Set("Authorization", "Bearer "+c.token)
}

// transportError classifies a failure to get any response.
func transportError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("dsec client: %w", err) // wraps the context's error
	}
	return fmt.Errorf("%w: %w", &api.Error{
		Code: api.CodeUnavailable, Message: "request to the dsec server failed",
		Infrastructure: true, Retryable: true,
	}, err)
}

// decodeError reads an error response into an *api.Error with Status set.
func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var eb api.ErrorBody
	if err := json.Unmarshal(b, &eb); err != nil || eb.Error == nil || eb.Error.Code == "" {
		msg := strings.TrimSpace(string(b))
		if msg == "" {
			msg = http.StatusText(resp.StatusCode)
		}
		eb.Error = api.NewError(codeForStatus(resp.StatusCode), "HTTP %d: %s", resp.StatusCode, msg)
	}
	eb.Error.Status = resp.StatusCode
	return eb.Error
}

// codeForStatus classifies a status that came without a dsec error body (e.g. from
// a load balancer in front of the server).
func codeForStatus(status int) api.Code {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden:
		return api.CodeUnauthorized
	case http.StatusNotFound:
		return api.CodeNotFound
	case http.StatusConflict:
		return api.CodeConflict
	case http.StatusRequestEntityTooLarge:
		return api.CodePayloadTooLarge
	case http.StatusTooManyRequests:
		return api.CodeResourceExhausted
	case http.StatusNotImplemented:
		return api.CodeNotImplemented
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		return api.CodeUnavailable
	case http.StatusGatewayTimeout:
		return api.CodeDeadlineExceeded
	}
	if status >= 500 {
		return api.CodeInternal
	}
	return api.CodeInvalidArgument
}

// do performs cl and decodes a JSON answer into out (nil: discard it).
func (c *Client) do(ctx context.Context, cl call, out any) error {
	resp, err := c.send(ctx, cl)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if resp.Header.Get(api.KeepAliveHeader) != "" {
		return decodeLate(resp, cl, out)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("dsec client: decoding %s %s response: %w", cl.method, cl.path, err)
	}
	return nil
}

// decodeLate decodes an answer the server started before the call ended
// (api.KeepAliveHeader): the result, or an api.LateErrorBody whose error is
// returned with the status it would have had.
func decodeLate(resp *http.Response, cl call, out any) error {
	var raw json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		return fmt.Errorf("dsec client: decoding %s %s response: %w", cl.method, cl.path, err)
	}
	var late struct {
		Error  json.RawMessage `json:"error"`
		Status int             `json:"status"`
	}
	if json.Unmarshal(raw, &late) == nil && len(late.Error) > 0 && late.Error[0] == '{' {
		var lb api.LateErrorBody
		if err := json.Unmarshal(raw, &lb); err == nil && lb.Error != nil && lb.Error.Code != "" {
			lb.Error.Status = lb.Status
			return lb.Error
		}
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("dsec client: decoding %s %s response: %w", cl.method, cl.path, err)
	}
	return nil
}

// Health checks that the server answers (no token needed).
func (c *Client) Health(ctx context.Context) error {
	var out struct {
		OK bool `json:"ok"`
	}
	if err := c.do(ctx, call{method: http.MethodGet, path: "/v1/health", retry: true}, &out); err != nil {
		return err
	}
	if !out.OK {
		return errors.New("dsec client: health check answered not ok")
	}
	return nil
}

// Info describes the node.
func (c *Client) Info(ctx context.Context) (api.Info, error) {
	var info api.Info
	err := c.do(ctx, call{method: http.MethodGet, path: "/v1/info", retry: true}, &info)
	return info, err
}

// Images lists the node's images and layered environments with layer accounting.
func (c *Client) Images(ctx context.Context) ([]api.Image, error) {
	var out []api.Image
	err := c.do(ctx, call{method: http.MethodGet, path: "/v1/images", retry: true}, &out)
	return out, err
}

// Image describes one image or environment: its layers, sizes and the bytes this
// node fetched of them.
func (c *Client) Image(ctx context.Context, name string) (api.Image, error) {
	var out api.Image
	err := c.do(ctx, call{method: http.MethodGet, path: "/v1/images/" + url.PathEscape(name), retry: true}, &out)
	return out, err
}

// ComposeImage composes an environment from layers in the node's blob store.
// PullImage makes the server fetch the image registry reference ref names
// (resolving its tag to a digest) unless it has it, and describes it (Ref
// and Digest set).
func (c *Client) PullImage(ctx context.Context, ref string) (api.Image, error) {
	var out api.Image
	err := c.do(ctx, call{method: http.MethodGet, path: "/v1/images/" + url.PathEscape(ref), retry: true}, &out)
	return out, err
}

// PullProgress returns how far the node's pull of ref (a reference or an
// image digest) got; not_found when none is in flight (not started, or
// ended: PullImage's answer says how).
func (c *Client) PullProgress(ctx context.Context, ref string) (api.PullProgress, error) {
	var out api.PullProgress
	err := c.do(ctx, call{method: http.MethodGet, path: "/v1/images:pulls", query: url.Values{"ref": {ref}}, retry: true}, &out)
	return out, err
}

// Pulls returns the node's image pulls in flight.
func (c *Client) Pulls(ctx context.Context) ([]api.PullProgress, error) {
	var out []api.PullProgress
	err := c.do(ctx, call{method: http.MethodGet, path: "/v1/images:pulls", retry: true}, &out)
	return out, err
}

func (c *Client) ComposeImage(ctx context.Context, req api.ComposeImageRequest) (api.Image, error) {
	var out api.Image
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/images", json: req}, &out)
	return out, err
}

// DeleteImage removes an environment, or an image pulled by reference from
// the node's image cache (name: the reference or the image digest); conflict
// while a sandbox uses it.
func (c *Client) DeleteImage(ctx context.Context, name string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: "/v1/images/" + url.PathEscape(name)}, nil)
}

// PruneImages removes every image pulled by reference that no sandbox uses
// from the node's image cache.
func (c *Client) PruneImages(ctx context.Context) (api.PruneImagesResult, error) {
	var out api.PruneImagesResult
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/images:prune"}, &out)
	return out, err
}

// RecordImage stores what the node's sandboxes read from the environment's layers
// as their prefetch lists.
func (c *Client) RecordImage(ctx context.Context, name string) ([]api.RecordedLayer, error) {
	var out []api.RecordedLayer
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/images/" + url.PathEscape(name) + "/record"}, &out)
	return out, err
}

// BuildImage builds environment req.Name on the server's node from a
// Dockerfile in the build context buildContext (a tar stream, plain or gzip;
// the Dockerfile is req.Dockerfile inside it, default "Dockerfile"). With
// req.Output set, the build streams: the RUN steps' output is written there
// line by line while the build runs.
func (c *Client) BuildImage(ctx context.Context, req api.BuildImageRequest, buildContext io.Reader) (api.BuildImageResult, error) {
	q := url.Values{"name": {req.Name}}
	if req.Dockerfile != "" {
		q.Set("dockerfile", req.Dockerfile)
	}
	if req.Target != "" {
		q.Set("target", req.Target)
	}
	if req.RunTimeoutMs > 0 {
		q.Set("run_timeout_ms", itoa(req.RunTimeoutMs))
	}
	if req.Network != nil {
		q.Set("network", req.Network.String())
	}
	for _, k := range slices.Sorted(maps.Keys(req.BuildArgs)) {
		q.Add("build_arg", k+"="+req.BuildArgs[k])
	}
	cl := call{method: http.MethodPost, path: "/v1/images:build", query: q, body: nonNil(buildContext), ctype: "application/x-tar"}
	var out api.BuildImageResult
	if req.Output == nil {
		err := c.do(ctx, cl, &out)
		return out, err
	}
	cl.header = http.Header{"Accept": {"application/x-ndjson"}}
	resp, err := c.send(ctx, cl)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/x-ndjson" {
		// A server that does not stream builds answers the result alone.
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return out, fmt.Errorf("dsec client: decoding the build result: %w", err)
		}
		return out, nil
	}
	return readBuildEvents(resp.Body, req.Output)
}

// readBuildEvents reads a streamed build's events (api.BuildEvent), writing
// each log line to out as it arrives, up to the result or the error.
func readBuildEvents(r io.Reader, out io.Writer) (api.BuildImageResult, error) {
	dec := json.NewDecoder(r)
	for {
		var ev api.BuildEvent
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return api.BuildImageResult{}, api.NewError(api.CodeUnavailable, "the build's stream ended without a result: %v", err)
		}
		switch ev.Type {
		case "log":
			_, _ = io.WriteString(out, ev.Log+"\n")
		case "result":
			if ev.Result == nil {
				return api.BuildImageResult{}, api.NewError(api.CodeInternal, "the build's result event holds no result")
			}
			return *ev.Result, nil
		case "error":
			if ev.Error == nil {
				ev.Error = api.NewError(api.CodeInternal, "the build failed")
			}
			if ev.Error.Status == 0 {
				ev.Error.Status = api.StatusOf(ev.Error.Code)
			}
			return api.BuildImageResult{}, ev.Error
		}
	}
}

// OpenAPI returns the server's OpenAPI document.
func (c *Client) OpenAPI(ctx context.Context) ([]byte, error) {
	resp, err := c.send(ctx, call{method: http.MethodGet, path: "/v1/openapi.yaml", retry: true})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
