package noderpc_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/cluster/noderpc"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// prompt bounds how long a stream may take to end after its node died or its
// context ended.
const prompt = 5 * time.Second

// runStream starts ExecStream of req (with a stdin the test never closes) and
// returns after the process started (with its PID); done receives its error.
func runStream(t *testing.T, ctx context.Context, c *noderpc.Client, id string, req api.ExecRequest) (done <-chan error, pid int) {
	t.Helper()
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	started := make(chan int, 1)
	errc := make(chan error, 1)
	go func() {
		_, err := c.ExecStream(ctx, id, req, session.Stream{Stdin: pr, Stdout: io.Discard, Stderr: io.Discard,
			Control: make(chan session.Control), Started: func(pid int) { started <- pid }})
		errc <- err
	}()
	select {
	case pid = <-started:
	case err := <-errc:
		t.Fatalf("stream ended before it started: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("stream did not start")
	}
	return errc, pid
}

// gone waits until host process pid no longer exists (the mock driver's
// processes are host processes): the node ended it.
func gone(t *testing.T, what string, pid int) {
	t.Helper()
	if !testwait.Until(prompt, func() bool { return unix.Kill(pid, 0) != nil }) {
		t.Errorf("%s: process %d still runs %v later", what, pid, prompt)
	}
}

// mockSandbox serves a mock agent and creates a sandbox on it through a client.
func mockSandbox(t *testing.T) (*node, *noderpc.Client, api.Sandbox) {
	t.Helper()
	n := serve(t, mockAgent(t), noderpc.HandlerOptions{})
	c := n.client(t, nil)
	sb, err := c.Create(ctxT(t), api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return n, c, sb
}

func waitErr(t *testing.T, what string, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(prompt):
		t.Fatalf("%s: still running %v later", what, prompt)
	}
	return nil
}

func TestNodeDiesMidExec(t *testing.T) {
	n, c, sb := mockSandbox(t)
	done, pid := runStream(t, ctxT(t), c, sb.ID, api.ExecRequest{Cmd: []string{"sleep", "30"}})
	n.srv.Close() // the node's server goes away: listener and connections
	transportErr(t, "ExecStream after the node died", waitErr(t, "ExecStream", done))
	// The agent behind it saw the call end and ended the command.
	gone(t, "after the connection dropped", pid)
	_, err := c.Get(ctxT(t), sb.ID)
	transportErr(t, "Get after the node died", err)
}

func TestCancelEndsExecStream(t *testing.T) {
	_, c, sb := mockSandbox(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	done, pid := runStream(t, ctx, c, sb.ID, api.ExecRequest{Cmd: []string{"sleep", "30"}})
	cancel()
	if err := waitErr(t, "ExecStream", done); !errors.Is(err, context.Canceled) {
		t.Errorf("ExecStream after cancel: %v, want context.Canceled", err)
	}
	gone(t, "after cancel", pid)
	// The node stays usable.
	if res, err := c.Exec(ctxT(t), sb.ID, api.ExecRequest{Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Errorf("exec after a cancelled stream: %+v, %v", res, err)
	}
}

// A dialled connection ends (EOF or error, no hang) when the node dies, and a
// read through it sees what the sandbox's side sent before.
func TestNodeDiesMidDial(t *testing.T) {
	n, c, sb := mockSandbox(t)
	// The mock driver's Dial reaches the host's loopback: a listener of the test
	// stands in for the sandbox's.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		io.WriteString(conn, "hello\n")
		io.Copy(io.Discard, conn) // holds the connection open
	}()
	conn, err := c.Dial(ctxT(t), sb.ID, ln.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	buf := make([]byte, 6)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "hello\n" {
		t.Fatalf("read %q, %v", buf, err)
	}
	if _, err := io.WriteString(conn, "ping"); err != nil {
		t.Fatal(err)
	}
	n.srv.Close()
	read := make(chan error, 1)
	go func() { _, err := conn.Read(buf); read <- err }()
	if err := waitErr(t, "Read after the node died", read); err == nil {
		t.Error("Read after the node died succeeded")
	}
}

// A file being read ends with unavailable when the node dies mid stream.
func TestNodeDiesMidRead(t *testing.T) {
	n, c, sb := mockSandbox(t)
	ctx := ctxT(t)
	fs, err := c.FS(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	const size = 32 << 20
	if _, err := fs.WriteFile(ctx, "/big", 0o644, io.LimitReader(zeros{}, size), size); err != nil {
		t.Fatal(err)
	}
	rc, info, err := fs.Open(ctx, "/big")
	if err != nil || info.Size != size {
		t.Fatalf("Open: %+v, %v", info, err)
	}
	defer rc.Close()
	if _, err := io.ReadFull(rc, make([]byte, 1<<16)); err != nil {
		t.Fatal(err)
	}
	n.srv.Close()
	done := make(chan error, 1)
	go func() {
		b, err := io.ReadAll(rc)
		if err == nil && len(b) < size-1<<16 {
			err = io.ErrUnexpectedEOF
		} else if err == nil {
			err = errors.New("read all of it")
		}
		done <- err
	}()
	err = waitErr(t, "reading a file after the node died", done)
	if errors.Is(err, io.ErrUnexpectedEOF) || (err != nil && strings.Contains(err.Error(), "read all")) {
		t.Errorf("read after the node died: %v, want unavailable", err)
	} else {
		transportErr(t, "read after the node died", err)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// Cancelling the context of an open file's reader ends its Read at once.
func TestCancelEndsRead(t *testing.T) {
	_, c, sb := mockSandbox(t)
	fs, err := c.FS(ctxT(t), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	const size = 32 << 20
	if _, err := fs.WriteFile(ctxT(t), "/big", 0o644, io.LimitReader(zeros{}, size), size); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	rc, _, err := fs.Open(ctx, "/big")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.ReadFull(rc, make([]byte, 1<<16)); err != nil {
		t.Fatal(err)
	}
	cancel()
	done := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, rc); done <- err }()
	if err := waitErr(t, "reading after cancel", done); !errors.Is(err, context.Canceled) {
		t.Errorf("read after cancel: %v, want context.Canceled", err)
	}
}
