package drivertest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Screen collects a terminal's output and lets a test wait for text in it.
type Screen struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

// NewScreen returns an empty screen.
func NewScreen() *Screen { return &Screen{changed: make(chan struct{})} }

func (s *Screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Write(p)
	close(s.changed)
	s.changed = make(chan struct{})
	return len(p), nil
}

// String is everything written so far.
func (s *Screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// WaitFor waits until the output after offset from contains text and returns
// the offset just past it.
func (s *Screen) WaitFor(t testing.TB, from int, text string, within time.Duration) int {
	t.Helper()
	deadline := time.After(within)
	for {
		s.mu.Lock()
		b := s.buf.Bytes()
		ch := s.changed
		if from <= len(b) {
			if i := bytes.Index(b[from:], []byte(text)); i >= 0 {
				s.mu.Unlock()
				return from + i + len(text)
			}
		}
		s.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no %q on the terminal within %v; it shows %q", text, within, s.String()[min(from, len(s.String())):])
		}
	}
}

// termProc starts p on a terminal of cols x rows with input fed from the
// returned writer and output collected on the returned screen.
func termProc(t *testing.T, inst driver.Instance, p driver.ProcSpec, cols, rows int) (driver.Proc, *io.PipeWriter, *Screen) {
	t.Helper()
	p.TTY = &api.TermSize{Cols: cols, Rows: rows}
	p.Env = append(p.Env, "TERM=xterm", "PS1=$ ")
	inR, inW := io.Pipe()
	scr := NewScreen()
	pr, err := inst.Exec(ctxT(t), p, driver.Stdio{Stdin: inR, Stdout: scr})
	if err != nil {
		t.Fatalf("Exec(%q) with a TTY: %v", p.Args, err)
	}
	t.Cleanup(func() {
		_ = pr.Signal(int(unix.SIGKILL))
		inW.Close()
		pr.Close()
	})
	return pr, inW, scr
}

func (s *suite) testTTY(t *testing.T) {
	s.needTTY(t)
	_, inst, _ := s.startNew(t, nil)
	pr, _, scr := termProc(t, inst, sh(`tty; stty size; test -t 0 && test -t 1 && test -t 2 && echo all-ttys; echo out; echo err >&2`), 100, 30)
	ex := waitExit(t, pr, 10*time.Second)
	out := scr.String()
	if ex.Code != 0 {
		t.Fatalf("exit %+v, terminal %q", ex, out)
	}
	lines := strings.Split(strings.ReplaceAll(out, "\r\n", "\n"), "\n")
	if len(lines) < 5 || !strings.HasPrefix(lines[0], "/dev/pts/") {
		t.Fatalf("tty printed %q, want /dev/pts/N (terminal %q)", lines[0], out)
	}
	if lines[1] != "30 100" || lines[2] != "all-ttys" {
		t.Errorf("stty size / isatty = %q / %q, want \"30 100\" / all-ttys", lines[1], lines[2])
	}
	// stdout and stderr are one stream on a terminal, in order.
	if lines[3] != "out" || lines[4] != "err" {
		t.Errorf("stdout and stderr on the terminal: %q", out)
	}
	if !strings.Contains(out, "\r\n") {
		t.Errorf("no \\r\\n in the output: the line discipline is not a terminal's (%q)", out)
	}
}

func (s *suite) testTTYResize(t *testing.T) {
	s.needTTY(t)
	_, inst, _ := s.startNew(t, nil)
	pr, _, scr := termProc(t, inst, sh(`trap 'echo winch; stty size' WINCH; echo ready; while :; do sleep 0.05; done`), 80, 24)
	off := scr.WaitFor(t, 0, "ready", 10*time.Second)
	if err := pr.Resize(132, 43); err != nil {
		t.Fatalf("Resize: %v", err)
	}
	off = scr.WaitFor(t, off, "winch", 10*time.Second)
	scr.WaitFor(t, off, "43 132", 10*time.Second)
}

// testTTYInterrupt: ^C typed on the terminal, and Signal(SIGINT), reach the job
// an interactive shell runs in the foreground, not the shell.
func (s *suite) testTTYInterrupt(t *testing.T) {
	s.needTTY(t)
	_, inst, _ := s.startNew(t, nil)
	pr, in, scr := termProc(t, inst, ps("sh", "-i"), 80, 24)
	type_ := func(text string) {
		t.Helper()
		if _, err := io.WriteString(in, text); err != nil {
			t.Fatalf("type %q: %v", text, err)
		}
	}
	type_("echo start$((20+1))\n")
	off := scr.WaitFor(t, 0, "start21", 10*time.Second)
	type_("sleep 100; echo not-$((0))interrupted\n")
	time.Sleep(300 * time.Millisecond)
	type_("\x03")
	type_("echo alive$((40+2))\n")
	off = scr.WaitFor(t, off, "alive42", 10*time.Second)
	type_("sleep 100\n")
	time.Sleep(300 * time.Millisecond)
	if err := pr.Signal(int(unix.SIGINT)); err != nil {
		t.Fatalf("Signal(SIGINT): %v", err)
	}
	type_("echo again$((1+1))\n")
	scr.WaitFor(t, off, "again2", 10*time.Second)
	type_("exit 7\n")
	if ex := waitExit(t, pr, 10*time.Second); ex.Code != 7 {
		t.Errorf("shell exit %+v, want 7 (it survived both interrupts)", ex)
	}
	if strings.Contains(scr.String(), "not-0interrupted") {
		t.Errorf("^C did not interrupt the foreground sleep: %q", scr.String())
	}
	// SIGKILL ends the shell itself, not only the job it runs.
	pr2, in2, scr2 := termProc(t, inst, ps("sh", "-i"), 80, 24)
	_, _ = io.WriteString(in2, "echo up$((2+2)); sleep 100\n")
	scr2.WaitFor(t, 0, "up4", 10*time.Second)
	time.Sleep(200 * time.Millisecond)
	if err := pr2.Signal(int(unix.SIGKILL)); err != nil {
		t.Fatalf("Signal(SIGKILL): %v", err)
	}
	if ex := waitExit(t, pr2, 10*time.Second); ex.Signal != int(unix.SIGKILL) {
		t.Errorf("shell after SIGKILL: exit %+v, want killed", ex)
	}
}

// testTTYInteractive drives python3's interactive prompt, which only prompts on
// a terminal.
func (s *suite) testTTYInteractive(t *testing.T) {
	s.needTTY(t)
	_, inst, _ := s.startNew(t, nil)
	if r := mustExec(t, inst, sh("command -v python3")); r.Exit.Code != 0 {
		t.Skip("no python3 in the image")
	}
	pr, in, scr := termProc(t, inst, ps("python3", "-i", "-q"), 80, 24)
	off := scr.WaitFor(t, 0, ">>> ", 20*time.Second)
	_, _ = io.WriteString(in, "print(6*7, 'answer')\n")
	off = scr.WaitFor(t, off, "42 answer\r\n", 10*time.Second)
	off = scr.WaitFor(t, off, ">>> ", 10*time.Second)
	_, _ = io.WriteString(in, "import os, sys; print(os.get_terminal_size(), sys.stdin.isatty())\n")
	scr.WaitFor(t, off, "columns=80, lines=24) True", 10*time.Second)
	_, _ = io.WriteString(in, "exit(3)\n")
	if ex := waitExit(t, pr, 10*time.Second); ex.Code != 3 {
		t.Errorf("python exit %+v, want 3", ex)
	}
}

// testTTYRecover: a tagged process on a terminal keeps its terminal when its
// driver goes away; a fresh driver's Attach gets the terminal back, and input
// typed then reaches the program.
func (s *suite) testTTYRecover(t *testing.T) {
	s.needTTY(t)
	_, inst, sp := s.startNew(t, nil)
	p := sh(`echo before; read line; echo "got:$line"; stty size; exit 4`)
	p.Tag = "tty-bg"
	p.TTY = &api.TermSize{Cols: 90, Rows: 20}
	scr := NewScreen()
	pr, err := inst.Exec(ctxT(t), p, driver.Stdio{Stdout: scr})
	if err != nil {
		t.Fatalf("Exec(tagged, TTY): %v", err)
	}
	scr.WaitFor(t, 0, "before", 10*time.Second)
	pr.Close() // the agent goes away

	d2 := s.newDriver(t)
	inst2, err := d2.Recover(ctxT(t), sp, inst.State())
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	inR, inW := io.Pipe()
	defer inW.Close()
	scr2 := NewScreen()
	pr2, err := inst2.Attach(ctxT(t), "tty-bg", driver.Stdio{Stdin: inR, Stdout: scr2})
	if err != nil {
		t.Fatalf("Attach(tty-bg): %v", err)
	}
	defer pr2.Close()
	_, _ = io.WriteString(inW, "hello\n")
	off := scr2.WaitFor(t, 0, "got:hello", 10*time.Second)
	scr2.WaitFor(t, off, "20 90", 10*time.Second)
	if ex := waitExit(t, pr2, 10*time.Second); ex.Code != 4 {
		t.Errorf("re-attached terminal process exit %+v, want 4", ex)
	}
}

func (s *suite) testTTYBadInput(t *testing.T) {
	_, inst, _ := s.startNew(t, nil)
	pr, err := inst.Exec(ctxT(t), ps("sleep", "100"), driver.Stdio{})
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if err := pr.Resize(80, 24); !errdefs.Is(err, api.CodeInvalidArgument) {
		t.Errorf("Resize of a process without a terminal = %v, want invalid_argument", err)
	}
	_ = pr.Signal(int(unix.SIGKILL))
	waitExit(t, pr, 10*time.Second)
	if !s.caps.TTY {
		return
	}
	for _, ts := range []api.TermSize{{}, {Cols: 0, Rows: 24}, {Cols: 80, Rows: -1}, {Cols: 100000, Rows: 24}, {Cols: 80, Rows: 1 << 20}} {
		p := ps("true")
		p.TTY = &ts
		if pr, err := inst.Exec(ctxT(t), p, driver.Stdio{}); !errdefs.Is(err, api.CodeInvalidArgument) {
			if err == nil {
				pr.Close()
			}
			t.Errorf("Exec with a %dx%d terminal = %v, want invalid_argument", ts.Cols, ts.Rows, err)
		}
	}
	pr, in, scr := termProc(t, inst, sh(`echo ready; read x; stty size`), 80, 24)
	off := scr.WaitFor(t, 0, "ready", 10*time.Second)
	for _, sz := range [][2]int{{0, 0}, {0, 10}, {70000, 10}, {10, 70000}} {
		if err := pr.Resize(sz[0], sz[1]); !errdefs.Is(err, api.CodeInvalidArgument) {
			t.Errorf("Resize(%d, %d) = %v, want invalid_argument", sz[0], sz[1], err)
		}
	}
	if err := pr.Resize(81, 25); err != nil {
		t.Errorf("Resize(81, 25) after bad sizes: %v", err)
	}
	// Nothing else was disturbed: the terminal has the last good size and the
	// sandbox runs commands.
	_, _ = io.WriteString(in, "x\n")
	scr.WaitFor(t, off, "25 81", 10*time.Second)
	if out := mustSh(t, inst, "echo still-fine"); out != "still-fine\n" {
		t.Errorf("exec after bad terminal sizes: %q", out)
	}
}

// testTTYStdinEOF: the end of the stdin stream reaches a program reading a
// canonical terminal as end of file (^D), also after a partial line.
func (s *suite) testTTYStdinEOF(t *testing.T) {
	s.needTTY(t)
	_, inst, _ := s.startNew(t, nil)
	for _, input := range []string{"one\ntwo\n", "one\npartial", ""} {
		p := sh(`cat >tmp/eof-in; echo "eof-seen $(wc -c <tmp/eof-in)"`)
		p.TTY = &api.TermSize{Cols: 80, Rows: 24}
		scr := NewScreen()
		pr, err := inst.Exec(ctxT(t), p, driver.Stdio{Stdin: strings.NewReader(input), Stdout: scr})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ex, err := pr.Wait(ctx)
		cancel()
		pr.Close()
		out := scr.String()
		if err != nil {
			t.Fatalf("input %q: Wait: %v; terminal %q", input, err, out)
		}
		if want := fmt.Sprintf("eof-seen %d", len(input)); ex.Code != 0 || !strings.Contains(out, want) {
			t.Errorf("input %q: exit %+v, terminal %q, want %q", input, ex, out, want)
		}
	}
}
