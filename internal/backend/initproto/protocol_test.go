package initproto

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestPSChunked(t *testing.T) {
	s := newSandbox(t, nil)
	ctx := context.Background()
	const n = 20
	for i := range n {
		tag := fmt.Sprintf("%02d:%s", i, strings.Repeat("t", 4000)) // 20 x 4 KiB: two PS packets
		r := s.dial(t)
		if _, err := r.Exec(ctx, ExecRequest{Args: []string{"true"}, Tag: tag}, [3]*os.File{}); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c := s.dial(t)
	ps, err := c.PS(ctx)
	if err != nil || len(ps) != n {
		t.Fatalf("ps: %d entries, %v", len(ps), err)
	}
	seen := map[string]bool{}
	for _, p := range ps {
		seen[p.Tag[:2]] = true
		if p.Running || p.PID <= 1 || len(p.Tag) != 4003 {
			t.Fatalf("entry %+v", p.Tag[:3])
		}
	}
	if len(seen) != n {
		t.Fatalf("duplicate entries")
	}
	if err := c.Ping(ctx); err != nil { // the connection is still in sync
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, ExecRequest{Args: []string{"true"}, Tag: strings.Repeat("x", 5000)}, [3]*os.File{}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("overlong tag: %v", err)
	}
}

func TestBadPackets(t *testing.T) {
	s := newSandbox(t, nil)
	nc, err := net.Dial("unixpacket", s.cfg.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, MaxPacket)
	for _, tc := range []struct {
		send string
		want string
	}{
		{strings.Repeat("x", MaxPacket+100) + "\x00", "errno=90"}, // EMSGSIZE
		{"PING", "errno=22"}, // not NUL-terminated
		{"NOPE\x00", "unknown op"},
		{"EXEC\x00arg=true\x00", "needs 3 fds"},
		{"SIGNAL\x00tag=x\x00sig=999\x00", "bad sig"},
		{"PING\x00" + strings.Repeat("\x00", 70000), "too many fields"},
		{"PING\x00", "PONG\x00"},
	} {
		if _, err := nc.Write([]byte(tc.send)); err != nil {
			t.Fatalf("send %.10q: %v", tc.send, err)
		}
		n, err := nc.Read(buf)
		if err != nil || !strings.Contains(string(buf[:n]), tc.want) {
			t.Fatalf("reply to %.10q: %q %v", tc.send, buf[:n], err)
		}
	}
}

func TestSpawnTimeout(t *testing.T) {
	requireRoot(t)
	script := filepath.Join(t.TempDir(), "hang")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec sleep 100\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := sandboxConfig(t, script, "/nonexistent", t.TempDir(), shortDir(t))
	var pid int
	cfg.BeforeStart = func(p int) error { pid = p; return nil }
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Spawn(ctx, cfg)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("spawn of a hanging init: %v after %v", err, time.Since(start))
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("init %d not reaped: %v", pid, err)
	}
}

// TestConnReuse: once its process's exit was returned, a connection carries
// the next EXEC (the node keeps idle connections); while a process runs, a
// second EXEC on it is refused and the connection stays usable.
func TestConnReuse(t *testing.T) {
	s := newSandbox(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := s.dial(t)
	if !c.Reusable() {
		t.Fatal("a new connection is not reusable")
	}
	sh := func(script string) ExecRequest {
		return ExecRequest{Args: []string{"sh", "-c", script}, Env: []string{"PATH=/bin"}}
	}
	pid, err := c.Exec(ctx, sh("sleep 30"), [3]*os.File{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Reusable() {
		t.Fatal("reusable while its process runs")
	}
	if _, err := c.Exec(ctx, sh("true"), [3]*os.File{}); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("second EXEC while the first runs: %v, want EBUSY", err)
	}
	c.Kill(int(syscall.SIGKILL))
	if e, err := c.Wait(ctx); err != nil || e.Status.Signal() != syscall.SIGKILL {
		t.Fatalf("wait for %d: %+v %v", pid, e, err)
	}
	for i := range 3 {
		if !c.Reusable() {
			t.Fatalf("exec %d: not reusable after its exit", i)
		}
		pid2, err := c.Exec(ctx, sh(fmt.Sprintf("exit %d", 10+i)), [3]*os.File{})
		if err != nil || pid2 == pid {
			t.Fatalf("exec %d on the reused connection: pid %d (first %d), %v", i, pid2, pid, err)
		}
		if e, err := c.Wait(ctx); err != nil || e.Status.ExitStatus() != 10+i {
			t.Fatalf("exec %d: exit %+v %v", i, e, err)
		}
	}
	// a start failure leaves the connection in sync as well
	var ee *ExecError
	if _, err := c.Exec(ctx, ExecRequest{Args: []string{"/nonexistent"}}, [3]*os.File{}); !errors.As(err, &ee) {
		t.Fatalf("exec of a missing binary: %v", err)
	}
	if !c.Reusable() {
		t.Fatal("not reusable after a start failure")
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	// a cancelled wait may leave the EXITED in flight: not reusable
	if _, err := c.Exec(ctx, sh("sleep 0.2"), [3]*os.File{}); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, time.Millisecond)
	defer wcancel()
	if _, err := c.Wait(wctx); err == nil {
		t.Fatal("wait with an expired context returned an exit")
	}
	if c.Reusable() {
		t.Fatal("reusable after a cancelled wait")
	}
}
