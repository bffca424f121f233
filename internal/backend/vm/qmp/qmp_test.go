package qmp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/testwait"
)

// fakeQEMU answers like QEMU: greeting, capabilities, an event before a
// reply, an error for an unknown command.
func fakeQEMU(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "qmp.sock")
	l, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	serveQMP(t, l)
	return p
}

// serveQMP answers one connection on l as fakeQEMU does.
func serveQMP(t *testing.T, l net.Listener) {
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Write([]byte(`{"QMP": {"version": {}, "capabilities": []}}` + "\n"))
		r := bufio.NewScanner(c)
		for r.Scan() {
			var req struct{ Execute string }
			json.Unmarshal(r.Bytes(), &req)
			switch req.Execute {
			case "qmp_capabilities":
				c.Write([]byte(`{"return": {}}` + "\n"))
			case "query-status":
				c.Write([]byte(`{"event": "STOP", "timestamp": {}}` + "\n" + `{"return": {"status": "paused", "running": false}}` + "\n"))
			default:
				c.Write([]byte(`{"error": {"class": "CommandNotFound", "desc": "The command ` + req.Execute + ` has not been found"}}` + "\n"))
			}
		}
	}()
}

// TestDialUntilWaitsForListen: QEMU creates its QMP socket (bind) before it
// listens on it, and a connection in between is refused. Dial fails on such
// a socket; DialUntil keeps trying while QEMU lives, connects once the socket
// listens, and gives up once QEMU is gone.
func TestDialUntilWaitsForListen(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bound := func() (string, int) {
		p := filepath.Join(t.TempDir(), "qmp.sock")
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Bind(fd, &unix.SockaddrUnix{Name: p}); err != nil {
			unix.Close(fd)
			t.Fatal(err)
		}
		return p, fd
	}

	p, fd := bound()
	if _, err := Dial(ctx, p); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Dial of a bound socket that does not listen: %v, want connection refused", err)
	}
	type result struct {
		c   *Conn
		err error
	}
	res := make(chan result, 1)
	go func() {
		c, err := DialUntil(ctx, p, make(chan struct{}))
		res <- result{c, err}
	}()
	if testwait.Until(300*time.Millisecond, func() bool { return len(res) > 0 }) {
		r := <-res
		t.Fatalf("DialUntil returned while the socket refused: %v", r.err)
	}
	if err := unix.Listen(fd, 1); err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), p)
	l, err := net.FileListener(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	serveQMP(t, l)
	select {
	case r := <-res:
		if r.err != nil {
			t.Fatalf("DialUntil once the socket listens: %v", r.err)
		}
		r.c.Close()
	case <-ctx.Done():
		t.Fatal("DialUntil did not connect once the socket listened")
	}

	// A socket that never listens: DialUntil ends when QEMU is gone.
	p, fd = bound()
	defer unix.Close(fd)
	gone := make(chan struct{})
	close(gone)
	if _, err := DialUntil(ctx, p, gone); err == nil || !strings.Contains(err.Error(), "QEMU exited") {
		t.Fatalf("DialUntil after QEMU exited: %v, want an error naming the exit", err)
	}
}

func TestExecute(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, fakeQEMU(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := c.Status(ctx)
	if err != nil || st != "paused" {
		t.Fatalf("status %q, %v; want paused (the event before the reply is skipped)", st, err)
	}
	_, err = c.Execute(ctx, "nope", nil)
	var qe *Error
	if !errors.As(err, &qe) || qe.Class != "CommandNotFound" {
		t.Fatalf("unknown command: %v, want a CommandNotFound *Error", err)
	}
}

// TestSendFD checks that getfd carries the descriptor: the fake QEMU reads
// it from the message's SCM_RIGHTS and writes through it.
func TestSendFD(t *testing.T) {
	p := filepath.Join(t.TempDir(), "qmp.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.AcceptUnix()
		if err != nil {
			return
		}
		defer c.Close()
		c.Write([]byte(`{"QMP": {"version": {}, "capabilities": []}}` + "\n"))
		buf, oob := make([]byte, 4096), make([]byte, 256)
		for {
			n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
			if err != nil {
				return
			}
			if msgs, _ := unix.ParseSocketControlMessage(oob[:oobn]); len(msgs) == 1 {
				if fds, _ := unix.ParseUnixRights(&msgs[0]); len(fds) == 1 {
					unix.Write(fds[0], buf[:n])
					unix.Close(fds[0])
				}
			}
			c.Write([]byte(`{"return": {}}` + "\n"))
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	out := filepath.Join(t.TempDir(), "out")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SendFD(ctx, "snap", f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	b, _ := os.ReadFile(out)
	if !strings.Contains(string(b), `"getfd"`) || !strings.Contains(string(b), `"fdname":"snap"`) {
		t.Errorf("what QEMU got with the descriptor: %q, want the getfd command naming snap", b)
	}
}
