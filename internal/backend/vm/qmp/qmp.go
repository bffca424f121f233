// Package qmp is a small client of QEMU's machine protocol (QMP): JSON
// objects over a unix socket. Dial negotiates capabilities; Execute sends one
// command and returns its "return" value, skipping asynchronous events. One
// command runs at a time per connection.
package qmp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Conn is one QMP connection.
type Conn struct {
	mu sync.Mutex
	c  net.Conn
	r  *bufio.Reader
}

// Error is an error reply from QEMU.
type Error struct {
	Class, Desc string
}

func (e *Error) Error() string { return "qmp: " + e.Class + ": " + e.Desc }

type reply struct {
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
	Event string          `json:"event"`
	QMP   json.RawMessage `json:"QMP"`
}

// Dial connects to the QMP socket at path and leaves capabilities
// negotiation mode.
func Dial(ctx context.Context, path string) (*Conn, error) {
	return DialUntil(ctx, path, nil)
}

// refusedRetry is how often DialUntil tries a refused socket again.
const refusedRetry = 5 * time.Millisecond

// DialUntil is Dial for a QEMU that may not listen yet. QEMU creates its
// socket (bind) before it listens on it, so a connection made in between is
// refused; until gone is closed (QEMU exited) a refused connection is tried
// again every few milliseconds, within ctx. A nil gone tries once, as Dial.
func DialUntil(ctx context.Context, path string, gone <-chan struct{}) (*Conn, error) {
	var d net.Dialer
	var nc net.Conn
	for {
		var err error
		if nc, err = d.DialContext(ctx, "unix", path); err == nil {
			break
		}
		if gone == nil || !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("qmp: dial: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("qmp: dial: %w (%w)", err, ctx.Err())
		case <-gone:
			return nil, fmt.Errorf("qmp: dial: %w (QEMU exited)", err)
		case <-time.After(refusedRetry):
		}
	}
	c := &Conn{c: nc, r: bufio.NewReaderSize(nc, 64<<10)}
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	var greet reply
	if err := c.read(&greet); err != nil || greet.QMP == nil {
		nc.Close()
		return nil, fmt.Errorf("qmp: no greeting: %v", err)
	}
	_ = nc.SetDeadline(time.Time{})
	if _, err := c.Execute(ctx, "qmp_capabilities", nil); err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

func (c *Conn) read(v *reply) error {
	line, err := c.r.ReadBytes('\n')
	if err != nil {
		return err
	}
	return json.Unmarshal(line, v)
}

// Execute runs cmd with args (nil: none) and returns QEMU's "return" value.
func (c *Conn) Execute(ctx context.Context, cmd string, args any) (json.RawMessage, error) {
	return c.execute(ctx, cmd, args, nil)
}

// SendFD hands f to QEMU under name (QMP getfd, the descriptor passed with
// SCM_RIGHTS), for commands that take "fd:name" (migrate): QEMU runs under a
// seccomp filter that refuses spawning a helper such as exec:cat.
func (c *Conn) SendFD(ctx context.Context, name string, f *os.File) error {
	_, err := c.execute(ctx, "getfd", map[string]any{"fdname": name}, f)
	return err
}

func (c *Conn) execute(ctx context.Context, cmd string, args any, f *os.File) (json.RawMessage, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	req := map[string]any{"execute": cmd}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(30 * time.Second)
	}
	_ = c.c.SetDeadline(dl)
	defer c.c.SetDeadline(time.Time{})
	if f != nil {
		uc, ok := c.c.(*net.UnixConn)
		if !ok {
			return nil, fmt.Errorf("qmp: %s: passing a descriptor needs a unix socket", cmd)
		}
		if _, _, err := uc.WriteMsgUnix(append(b, '\n'), unix.UnixRights(int(f.Fd())), nil); err != nil {
			return nil, fmt.Errorf("qmp: %s: %w", cmd, err)
		}
	} else if _, err := c.c.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("qmp: %s: %w", cmd, err)
	}
	for {
		var r reply
		if err := c.read(&r); err != nil {
			return nil, fmt.Errorf("qmp: %s: %w", cmd, err)
		}
		if r.Event != "" {
			continue
		}
		if r.Error != nil {
			return nil, &Error{Class: r.Error.Class, Desc: r.Error.Desc}
		}
		return r.Return, nil
	}
}

// Status is the run state of the VM ("running", "paused", ...).
func (c *Conn) Status(ctx context.Context) (string, error) {
	raw, err := c.Execute(ctx, "query-status", nil)
	if err != nil {
		return "", err
	}
	var s struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("qmp: query-status: %w", err)
	}
	return s.Status, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }
