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
