package progress

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
)

// TestQuietWhenPiped: a pipe, a file and a buffer get nothing, whatever is
// counted.
func TestQuietWhenPiped(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for _, out := range []io.Writer{w, f, &buf} {
		if IsTerminal(out) {
			t.Fatalf("%T is a terminal?", out)
		}
		for _, b := range []*Bar{New(out, "creating", 10), NewBytes(out, "building", 0),
			Start(WithOutput(context.Background(), out), "bench", 5)} {
			b.Add(3)
			b.Fail(1)
			b.SetTotal(20)
			b.Finish()
		}
	}
	w.Close()
	piped, _ := io.ReadAll(r)
	filed, _ := os.ReadFile(f.Name())
	if len(piped)+len(filed)+buf.Len() != 0 {
		t.Errorf("wrote %q to a pipe, %q to a file, %q to a buffer", piped, filed, buf.String())
	}
	// No output configured at all: silent too.
	Start(context.Background(), "x", 1).Add(1)
}

// TestDrawsOnTerminal: on a pty the bar is drawn, in place, and ends with a
// newline.
func TestDrawsOnTerminal(t *testing.T) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	defer tty.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Cols: 100, Rows: 24}); err != nil {
		t.Fatal(err)
	}
	got := make(chan string)
	go func() {
		var all []byte
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			all = append(all, buf[:n]...)
			if err != nil || bytes.Contains(all, []byte("\n")) {
				got <- string(all)
				return
			}
		}
	}()
	b := Start(WithOutput(context.Background(), tty), "creating", 4)
	if b == nil {
		t.Fatal("no bar on a terminal")
	}
	b.Add(1)
	b.Fail(1)
	b.Add(2)
	b.Finish()
	select {
	case out := <-got:
		if !strings.Contains(out, "\r\x1b[K") || !strings.Contains(out, "creating [") ||
			!strings.Contains(out, "4/4  100%") || !strings.Contains(out, "1 failed") {
			t.Errorf("terminal got %q", out)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing drawn")
	}
}

func TestLine(t *testing.T) {
	now := time.Unix(100, 0)
	b := newBar(io.Discard, "build", 0, true, func() int { return 60 })
	b.now = func() time.Time { return now }
	b.start = now
	now = now.Add(2 * time.Second)
	b.done = 3 << 20
	if got, want := b.lineLocked(), "build 3.0 MiB  1.5 MiB/s  2s"; got != want {
		t.Errorf("unknown total: %q, want %q", got, want)
	}
	c := newBar(io.Discard, "create", 10, false, func() int { return 60 })
	c.now = b.now
	c.start = now.Add(-4 * time.Second)
	c.done, c.failed = 4, 1
	got := c.lineLocked()
	if want := "] 4/10  40%  1.0/s  eta 6s  1 failed"; !strings.HasSuffix(got, want) || !strings.HasPrefix(got, "create [####") || len(got) != 59 {
		t.Errorf("line %q (%d), want create [#...-] ending %q, 59 wide", got, len(got), want)
	}
	// A narrow terminal drops the bar, then cuts the line.
	c.width = func() int { return 30 }
	if got := c.lineLocked(); strings.Contains(got, "[") || len(got) > 29 {
		t.Errorf("narrow line %q", got)
	}
}

// TestAbove: lines printed through Above land on a cleared line, the bar after them.
func TestAbove(t *testing.T) {
	var buf bytes.Buffer
	b := newBar(&buf, "creating", 2, false, func() int { return 60 })
	b.Above(func() { buf.WriteString("sb-1\n") })
	if got := buf.String(); !strings.HasPrefix(got, "\r\x1b[Ksb-1\n\r\x1b[Kcreating [") {
		t.Errorf("got %q", got)
	}
	var nilBar *Bar
	ran := false
	nilBar.Above(func() { ran = true })
	if !ran {
		t.Error("a silent bar did not print")
	}
}
