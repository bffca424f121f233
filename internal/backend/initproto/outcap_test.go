package initproto

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/testwait"
)

// runCapped starts script with OutputCap into two files and returns the
// connection and the files' paths.
func runCapped(t *testing.T, s *sandbox, script string, limit int64) (*Conn, string, string) {
	t.Helper()
	dir := t.TempDir()
	paths := [2]string{filepath.Join(dir, "stdout"), filepath.Join(dir, "stderr")}
	var files [2]*os.File
	for i, p := range paths {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files[i] = f
	}
	c := s.dial(t)
	if _, err := c.Exec(context.Background(), ExecRequest{Args: []string{"sh", "-c", script}, Env: []string{"PATH=/bin"},
		OutputCap: limit}, [3]*os.File{nil, files[0], files[1]}); err != nil {
		t.Fatal(err)
	}
	return c, paths[0], paths[1]
}

// TestOutputCapBoundsAFlood: `yes` on both streams keeps running (the init
// drains the pipes) while each log stays at exactly the cap plus one marker.
func TestOutputCapBoundsAFlood(t *testing.T) {
	s := newSandbox(t, nil)
	const limit = 1 << 20
	c, out, errp := runCapped(t, s, "yes >&2 & exec yes", limit)
	marker := fmt.Sprintf("\n[dsec: output truncated after %d bytes]\n", limit)
	check := func() {
		t.Helper()
		for _, p := range []string{out, errp} {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) != limit+len(marker) || !strings.HasSuffix(string(b), marker) || !strings.HasPrefix(string(b), "y\ny\n") {
				t.Fatalf("%s: %d bytes, ends %q", filepath.Base(p), len(b), b[max(0, len(b)-80):])
			}
		}
	}
	// both logs reach the cap and end with the marker
	var o, e []byte
	marked := testwait.Until(30*time.Second, func() bool {
		o, _ = os.ReadFile(out)
		e, _ = os.ReadFile(errp)
		return strings.HasSuffix(string(o), marker) && strings.HasSuffix(string(e), marker)
	})
	if !marked {
		t.Fatalf("no marker in both logs within 30 s: %d and %d bytes", len(o), len(e))
	}
	check()
	// both yes still run, i.e. are not blocked on a full pipe: they use CPU
	// (a further 0.2 s between them), and the logs stay at the cap meanwhile
	cpu := func() (n int, ticks int) {
		t.Helper()
		r := s.sh(t, "cat /proc/[0-9]*/stat | grep '(yes)'")
		for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			f := strings.Fields(l)
			if len(f) < 15 {
				continue
			}
			u, _ := strconv.Atoi(f[13])
			k, _ := strconv.Atoi(f[14])
			n, ticks = n+1, ticks+u+k
		}
		return n, ticks
	}
	n0, t0 := cpu()
	if n0 != 2 {
		t.Fatalf("%d yes processes, want 2", n0)
	}
	var ticks int
	used := testwait.Until(30*time.Second, func() bool {
		var n int
		n, ticks = cpu()
		if n != 2 {
			t.Fatalf("%d yes processes, want 2", n)
		}
		return ticks >= t0+20
	})
	if !used {
		t.Fatalf("the yes processes used %d CPU ticks in 30 s: blocked on a full pipe?", ticks-t0)
	}
	check()
	if err := c.Kill(int(syscall.SIGKILL)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestOutputCapKeepsShortOutput: output below the cap arrives whole, and is
// in the file by the time the exit is reported.
func TestOutputCapKeepsShortOutput(t *testing.T) {
	s := newSandbox(t, nil)
	for i := range 20 {
		c, out, errp := runCapped(t, s, "echo out; echo err >&2", 1<<20)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ex, err := c.Wait(ctx)
		cancel()
		if err != nil || ex.Status.ExitStatus() != 0 {
			t.Fatalf("run %d: %+v %v", i, ex, err)
		}
		for p, want := range map[string]string{out: "out\n", errp: "err\n"} {
			if b, _ := os.ReadFile(p); string(b) != want {
				t.Fatalf("run %d: %s = %q, want %q", i, filepath.Base(p), b, want)
			}
		}
	}
}
