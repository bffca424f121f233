package procio

import (
	"bytes"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/backend/driver"
)

// slowWriter takes its input slowly, as a client on a slow connection does.
type slowWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *slowWriter) Write(b []byte) (int, error) {
	time.Sleep(150 * time.Millisecond) // the slow consumer under test: each write takes this long
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(b)
}

func (w *slowWriter) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Len()
}

// TestDrainWaitsForASlowConsumer: a process that wrote its whole output and
// exited loses none of it to Drain, however long the consumer takes (here 150
// ms a write, more than the grace): the grace counts from the last
// progress, not from the exit.
func TestDrainWaitsForASlowConsumer(t *testing.T) {
	w := &slowWriter{}
	p, err := Open(driver.Stdio{Stdout: w})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Start()
	want := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB: the pipe holds it
	done := make(chan error, 1)
	go func() {
		_, err := p.Child[1].Write(want)
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	p.CloseChild() // the process exited
	p.Drain(DrainGrace)
	if w.Len() != len(want) {
		t.Fatalf("drained %d of %d bytes", w.Len(), len(want))
	}
}

// TestDrainStopsOnAnIdleHolder: a descendant that keeps the pipe open and
// writes nothing ends the drain after about the grace.
func TestDrainStopsOnAnIdleHolder(t *testing.T) {
	p, out := heldPipes(t)
	p.Start()
	if _, err := p.Child[1].WriteString("x"); err != nil {
		t.Fatal(err)
	}
	p.CloseChild()
	t0 := time.Now()
	p.Drain(DrainGrace)
	if d := time.Since(t0); d > DrainGrace+2*time.Second {
		t.Errorf("drain took %v with an idle holder (grace %v)", d, DrainGrace)
	}
	if out.String() != "x" {
		t.Errorf("output %q", out.String())
	}
}

// TestDrainStopsOnABusyHolder: a descendant that never stops writing ends the
// drain at the limit (DrainMax in Drain; 1 s here).
func TestDrainStopsOnABusyHolder(t *testing.T) {
	const limit = time.Second
	p, err := Open(driver.Stdio{Stdout: &bytes.Buffer{}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	holder, err := dupFile(p.Child[1])
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	go func() {
		defer holder.Close()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := holder.WriteString("y\n"); err != nil {
				return
			}
			time.Sleep(time.Millisecond) // the busy holder under test: a write every millisecond
		}
	}()
	defer close(stop)
	p.Start()
	p.CloseChild()
	t0 := time.Now()
	p.drain(DrainGrace, limit)
	if d := time.Since(t0); d < limit || d > limit+3*time.Second {
		t.Errorf("drain took %v with a busy holder, want about %v", d, limit)
	}
}

// heldPipes opens Pipes whose stdout goes to the returned buffer and whose
// child end a descendant (a duplicate closed when the test ends) keeps open.
func heldPipes(t *testing.T) (*Pipes, *bytes.Buffer) {
	t.Helper()
	out := &bytes.Buffer{}
	p, err := Open(driver.Stdio{Stdout: out})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	holder, err := dupFile(p.Child[1])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Close() })
	return p, out
}

func dupFile(f *os.File) (*os.File, error) {
	fd, err := dupCloexec(int(f.Fd()))
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

func dupCloexec(fd int) (int, error) { return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0) }

// TestDrainKeepsUnreadOutput: output the process wrote before it exited is
// delivered even when Drain gives up before the pump read it (the pump not
// scheduled within the grace on a busy machine). The pump is made to stall
// from the start here by a read deadline already past, which is how Drain
// stops it; the holder keeps the pipe open, so only the grace ends the drain.
func TestDrainKeepsUnreadOutput(t *testing.T) {
	p, out := heldPipes(t)
	want := bytes.Repeat([]byte("0123456789abcdef"), 2048) // 32 KiB: the pipe holds it
	if _, err := p.Child[1].Write(want); err != nil {
		t.Fatal(err)
	}
	p.CloseChild()
	if err := p.outR[0].SetReadDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	p.Start()
	p.Drain(DrainGrace)
	if !bytes.Equal(out.Bytes(), want) {
		t.Fatalf("drained %d of %d bytes", out.Len(), len(want))
	}
}

// TestTermDrainKeepsUnreadOutput: the same for a terminal, whose slave is
// closed (the program exited) before the pump could read.
func TestTermDrainKeepsUnreadOutput(t *testing.T) {
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	term := NewTerm(master)
	defer term.Close()
	slave, err := OpenPeer(master)
	if err != nil {
		t.Fatal(err)
	}
	holder, err := dupFile(slave)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := slave.WriteString("tty output\n"); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	if err := master.SetReadDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	term.Start(nil, &out)
	term.Drain(DrainGrace)
	if out.String() != "tty output\r\n" {
		t.Fatalf("terminal output %q", out.String())
	}
}
