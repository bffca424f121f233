package procio

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestFilesPassThrough: a caller's *os.File goes to the process as it is, and
// CloseChild leaves it open.
func TestFilesPassThrough(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := Open(driver.Stdio{Stdout: f})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Child[1] != f {
		t.Errorf("stdout is not the caller's file")
	}
	if p.Child[0] == nil || p.Child[2] == nil {
		t.Fatalf("nil stdin/stderr: %v", p.Child)
	}
	p.CloseChild()
	p.Close()
	if _, err := f.WriteString("still open"); err != nil {
		t.Errorf("the caller's file was closed: %v", err)
	}
}

// TestOneWriterOnePipe: the same writer for stdout and stderr gets one pipe,
// so what the process writes keeps its order.
func TestOneWriterOnePipe(t *testing.T) {
	var out bytes.Buffer
	p, err := Open(driver.Stdio{Stdin: strings.NewReader("in"), Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Child[1] != p.Child[2] {
		t.Fatal("two pipes for one writer")
	}
	p.Start()
	for _, s := range []string{"a", "b", "c"} {
		if _, err := p.Child[1+len(s)%2].WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	in := make([]byte, 2)
	if _, err := p.Child[0].Read(in); err != nil || string(in) != "in" {
		t.Errorf("stdin read %q, %v", in, err)
	}
	p.CloseChild()
	p.Drain(DrainGrace)
	if out.String() != "abc" {
		t.Errorf("output %q, want abc", out.String())
	}
}

func TestCheckSize(t *testing.T) {
	for _, ts := range []api.TermSize{{Cols: 1, Rows: 1}, {Cols: 80, Rows: 24}, {Cols: session.MaxTermSide, Rows: session.MaxTermSide}} {
		if err := CheckSize(ts.Cols, ts.Rows); err != nil {
			t.Errorf("%v: %v", ts, err)
		}
	}
	for _, ts := range []api.TermSize{{}, {Cols: 0, Rows: 24}, {Cols: 80, Rows: -1}, {Cols: session.MaxTermSide + 1, Rows: 24}, {Cols: 80, Rows: 1 << 16}} {
		if err := CheckSize(ts.Cols, ts.Rows); !errdefs.Is(err, api.CodeInvalidArgument) {
			t.Errorf("%v: %v, want invalid_argument", ts, err)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestUncomparableWriters: writers of a func type cannot be compared; each gets
// its own pipe (and Open does not panic).
func TestUncomparableWriters(t *testing.T) {
	var n int
	w := writerFunc(func(p []byte) (int, error) { n += len(p); return len(p), nil })
	p, err := Open(driver.Stdio{Stdout: w, Stderr: w})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Child[1] == p.Child[2] {
		t.Error("one pipe for writers that cannot be compared")
	}
	p.Start()
	_, _ = p.Child[1].WriteString("ab")
	_, _ = p.Child[2].WriteString("c")
	p.CloseChild()
	p.Drain(DrainGrace)
	if n != 3 {
		t.Errorf("%d bytes arrived, want 3", n)
	}
}

func TestCapWriter(t *testing.T) {
	var b bytes.Buffer
	w := CapWriter(&b, 10, 4)
	for _, s := range []string{"abc", "defgh", "ijk"} {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if want := "abcdef\n[dsec: output truncated after 10 bytes]\n"; b.String() != want {
		t.Errorf("capped output %q, want %q", b.String(), want)
	}
}
