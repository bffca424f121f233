package lazy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Client is the agent's side of layerd: it finds the running layerd through its
// socket, or starts one (Setsid, so it outlives the agent), and asks it to
// acquire and release layers.
type Client struct {
	cfg Config
	// Exe is the binary started as layerd (default: this executable); it must call
	// MaybeMain early (the dsec binary does).
	Exe string

	mu   sync.Mutex
	http *http.Client
}

// NewClient returns a client for the layerd of cfg.Root; nothing starts until the
// first Acquire.
func NewClient(cfg Config) *Client {
	cfg.defaults()
	sock := SocketPath(cfg.Root)
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var dl net.Dialer
			return dl.DialContext(ctx, "unix", sock)
		},
		MaxIdleConnsPerHost: 8,
	}
	return &Client{cfg: cfg, http: &http.Client{Transport: tr}}
}

// Root is the layers directory.
func (c *Client) Root() string { return c.cfg.Root }

func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body *bytes.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	} else {
		body = bytes.NewReader(nil)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://layerd"+path, body)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		var we wireErr
		if json.NewDecoder(resp.Body).Decode(&we) != nil || we.Code == "" {
			return errdefs.New(api.CodeInternal, "layerd: HTTP %d", resp.StatusCode)
		}
		return &remoteErr{code: we.Code, msg: we.Message}
	}
	if out != nil {
		err = json.NewDecoder(resp.Body).Decode(out)
	}
	_, _ = io.Copy(io.Discard, resp.Body) // drained: the connection is reused
	return err
}

// remoteErr carries layerd's error code back.
type remoteErr struct {
	code api.Code
	msg  string
}

func (e *remoteErr) Error() string { return e.msg }

func toErr(err error) error {
	if re, ok := err.(*remoteErr); ok {
		return errdefs.New(re.code, "%s", re.msg)
	}
	return err
}

// Running reports whether layerd answers, and its pid.
func (c *Client) Running(ctx context.Context) (int, bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var p struct{ Pid int }
	if err := c.call(ctx, "GET", "/ping", nil, &p); err != nil {
		return 0, false
	}
	return p.Pid, true
}

// Ensure starts layerd if it is not running and waits until it answers.
func (c *Client) Ensure(ctx context.Context) (int, error) {
	if pid, ok := c.Running(ctx); ok {
		return pid, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if pid, ok := c.Running(ctx); ok {
		return pid, nil
	}
	exe := c.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return 0, errdefs.Internal(err, "layerd: find executable")
		}
	}
	if err := os.MkdirAll(c.cfg.Root, 0o700); err != nil {
		return 0, errdefs.Internal(err, "layerd root")
	}
	logf, err := os.OpenFile(filepath.Join(c.cfg.Root, "layerd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, errdefs.Internal(err, "layerd log")
	}
	defer logf.Close()
	cj, _ := json.Marshal(c.cfg)
	cmd := exec.Command(exe, "layerd")
	cmd.Env = append(os.Environ(), EnvMain+"="+string(cj))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, errdefs.Internal(err, "start layerd")
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }() // reap it if it dies while we live
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if pid, ok := c.Running(ctx); ok {
			return pid, nil
		}
		select {
		case <-exited:
			// Lost a race with another starter, or failed: a running one answers.
			if pid, ok := c.Running(ctx); ok {
				return pid, nil
			}
			return 0, errdefs.New(api.CodeUnavailable, "layerd exited at start (see %s)", filepath.Join(c.cfg.Root, "layerd.log"))
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return 0, errdefs.New(api.CodeUnavailable, "layerd did not start within 15s (see %s)", filepath.Join(c.cfg.Root, "layerd.log"))
}

// Acquire mounts the layers for holder and returns their mount directories. It
// asks the running layerd directly (one round trip on the create path) and starts
// layerd only if nothing answers.
func (c *Client) Acquire(ctx context.Context, req AcquireRequest) ([]string, error) {
	var resp AcquireResponse
	err := c.call(ctx, "POST", "/acquire", req, &resp)
	if notRunning(err) {
		if _, err := c.Ensure(ctx); err != nil {
			return nil, err
		}
		err = c.call(ctx, "POST", "/acquire", req, &resp)
	}
	if err != nil {
		return nil, toErr(err)
	}
	return resp.Mounts, nil
}

// notRunning reports whether err means that no layerd listens on the socket (the
// request never reached one).
func notRunning(err error) bool {
	var oe *net.OpError
	return err != nil && errors.As(err, &oe) && oe.Op == "dial"
}

// Release drops holder's layers. Without a running layerd there is nothing held.
func (c *Client) Release(ctx context.Context, holder string) error {
	err := c.call(ctx, "POST", "/release", map[string]string{"Holder": holder}, nil)
	if notRunning(err) {
		return nil
	}
	return toErr(err)
}

// Sync drops every holder not in keep (no-op without a running layerd).
func (c *Client) Sync(ctx context.Context, keep []string) error {
	err := c.call(ctx, "POST", "/sync", map[string][]string{"Keep": keep}, nil)
	if notRunning(err) {
		return nil
	}
	return toErr(err)
}

// Stats returns layerd's accounting (empty without a running layerd).
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	err := c.call(ctx, "GET", "/stats", nil, &s)
	if notRunning(err) {
		return Stats{Layers: []LayerStats{}}, nil
	}
	return s, toErr(err)
}

// Access returns the order in which this node's sandboxes first read the chunks
// of a mounted layer (not_found if it is not mounted).
func (c *Client) Access(ctx context.Context, digest string) (AccessList, error) {
	var al AccessList
	h, err := blob.ParseDigest(digest)
	if err != nil {
		return al, err
	}
	if _, ok := c.Running(ctx); !ok {
		return al, errdefs.NotFound("layerd is not running: no layer is mounted")
	}
	return al, toErr(c.call(ctx, "GET", "/access/"+h, nil, &al))
}

// Stop asks layerd to unmount everything and exit, and waits for it and for its
// holder (which lets go once the mounts are gone). A layerd that is down while its
// holder starts it again is waited for and stopped too.
func (c *Client) Stop(ctx context.Context) error {
	holder := HolderPid(c.cfg.Root)
	pid, ok := c.Running(ctx)
	for i := 0; !ok && alive(holder) && i < 100; i++ {
		time.Sleep(50 * time.Millisecond)
		pid, ok = c.Running(ctx)
	}
	if ok {
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			return err
		}
		if !waitExit(pid, 10*time.Second) {
			// Stuck: SIGQUIT makes the Go runtime write every goroutine's
			// stack to layerd's log before it exits, for whoever looks.
			_ = syscall.Kill(pid, syscall.SIGQUIT)
			waitExit(pid, 2*time.Second)
			return fmt.Errorf("layerd %d did not exit within 10 s of SIGTERM (its goroutines are in %s)", pid, filepath.Join(c.cfg.Root, "layerd.log"))
		}
	}
	if holder > 0 && !waitExit(holder, 5*time.Second) {
		_ = syscall.Kill(holder, syscall.SIGTERM)
		if !waitExit(holder, 5*time.Second) {
			return fmt.Errorf("layerd holder %d did not exit", holder)
		}
	}
	return nil
}

func alive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }

// waitExit waits for pid to be gone. A zombie counts as gone once it has stayed
// one for a second (its parent may not be one that reaps: a holder whose layerd
// died belongs to init, or to a subreaper that never waits).
func waitExit(pid int, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	var zombieSince time.Time
	for alive(pid) {
		if zombie(pid) {
			if zombieSince.IsZero() {
				zombieSince = time.Now()
			} else if time.Since(zombieSince) > time.Second {
				return true
			}
		} else if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(rest, "Z")
}

// HolderPid returns the pid of the holder of root's FUSE connection (0 if none:
// its pid file names no live holder of this root).
func HolderPid(root string) int {
	pid := readPid(HolderPidPath(root))
	if pid <= 0 {
		return 0
	}
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil || !bytes.Contains(env, []byte(EnvHolder+"=")) || !bytes.Contains(env, []byte(filepath.Clean(root))) {
		return 0
	}
	return pid
}

// Pid reads layerd's pid file (0 if none).
func Pid(root string) int { return readPid(PidPath(root)) }
