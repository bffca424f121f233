package initproto

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// openSandboxPTY opens a terminal in the sandbox's own devpts.
func openSandboxPTY(t *testing.T, s *sandbox) (master, slave *os.File) {
	t.Helper()
	mfd, err := unix.Open(fmt.Sprintf("/proc/%d/root/dev/pts/ptmx", s.init.PID), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	sfd, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(mfd), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if e != 0 {
		t.Fatal(e)
	}
	master, slave = os.NewFile(uintptr(mfd), "ptm"), os.NewFile(sfd, "pts")
	t.Cleanup(func() { master.Close(); slave.Close() })
	return master, slave
}

// readUntil reads the master until text shows up.
func readUntil(t *testing.T, m *os.File, text string) string {
	t.Helper()
	var got bytes.Buffer
	buf := make([]byte, 4096)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(got.String(), text) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q from the terminal; got %q", text, got.String())
		}
		_ = m.SetReadDeadline(deadline)
		n, err := m.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			t.Fatalf("read terminal: %v (got %q)", err, got.String())
		}
	}
	return got.String()
}

// TestTTYExec: with tty=1 the process gets the slave as controlling terminal
// (tty prints its name; only a session leader with a ctty can open /dev/tty),
// and the init keeps the master of a tagged process for a later WAIT.
func TestTTYExec(t *testing.T) {
	s := newSandbox(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	master, slave := openSandboxPTY(t, s)
	c := s.dial(t)
	_, err := c.Exec(ctx, ExecRequest{
		Args: []string{"sh", "-c", "busybox tty; echo ctty >/dev/tty && echo has-ctty; read x; echo got$x; exit 3"},
		Env:  []string{"PATH=/bin"}, Tag: "t1", TTY: true, Master: master,
	}, [3]*os.File{slave, slave, slave})
	if err != nil {
		t.Fatal(err)
	}
	slave.Close()
	out := readUntil(t, master, "has-ctty")
	if !strings.Contains(out, "/dev/pts/0") {
		t.Errorf("tty printed %q, want the sandbox's /dev/pts/0", out)
	}
	// The caller goes away; the terminal stays with the init.
	master.Close()
	c.Close()
	c2 := s.dial(t)
	if _, running, _, err := c2.Attach(ctx, "t1"); err != nil || !running {
		t.Fatalf("attach: running %v, %v", running, err)
	}
	m2 := c2.TakeMaster()
	if m2 == nil {
		t.Fatal("Attach of a terminal process handed back no master")
	}
	defer m2.Close()
	if _, err := m2.WriteString("y\n"); err != nil {
		t.Fatal(err)
	}
	readUntil(t, m2, "goty")
	if e, err := c2.Wait(ctx); err != nil || e.Status.ExitStatus() != 3 {
		t.Fatalf("wait: %v %v", e.Status, err)
	}
	// The exit record keeps the master: output not read yet is not lost.
	c3 := s.dial(t)
	if _, running, _, err := c3.Attach(ctx, "t1"); err != nil || running {
		t.Fatalf("attach after exit: running %v, %v", running, err)
	}
	if m3 := c3.TakeMaster(); m3 == nil {
		t.Error("no master with the exit record")
	} else {
		m3.Close()
	}
	// An untagged terminal process is fine too, and plain processes hand no
	// master back.
	if r := s.run(t, ExecRequest{Args: []string{"true"}, Tag: "plain"}); r.err != nil {
		t.Fatal(r.err)
	}
	c4 := s.dial(t)
	if _, _, _, err := c4.Attach(ctx, "plain"); err != nil {
		t.Fatal(err)
	}
	if m := c4.TakeMaster(); m != nil {
		m.Close()
		t.Error("a process without a terminal handed back a master")
	}
}

// TestTTYBadRequests: a kept master needs a tag and tty=1; tty takes 0 or 1.
func TestTTYBadRequests(t *testing.T) {
	s := newSandbox(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	master, slave := openSandboxPTY(t, s)
	stdio := [3]*os.File{slave, slave, slave}
	// Refused on the Go side already.
	if _, err := s.dial(t).Exec(ctx, ExecRequest{Args: []string{"true"}, TTY: true, Master: master}, stdio); !errdefs.Is(err, api.CodeInvalidArgument) {
		t.Errorf("master without tag: %v", err)
	}
	// And by the init, for a client that does not check.
	for _, tc := range []struct {
		pkt  *Packet
		fds  int
		want string
	}{
		{NewPacket("EXEC").Add("arg", "true").Add("tty", "1"), 4, "needs tag and tty=1"},
		{NewPacket("EXEC").Add("arg", "true").Add("tag", "x"), 4, "needs tag and tty=1"},
		{NewPacket("EXEC").Add("arg", "true").Add("tty", "2"), 3, "bad tty"},
		{NewPacket("EXEC").Add("arg", "true").Add("tty", "-1"), 3, "bad tty"},
		{NewPacket("EXEC").Add("arg", "true"), 5, "needs 3 fds"},
	} {
		c := s.dial(t)
		files := []*os.File{slave, slave, slave, master, master}[:tc.fds]
		fds, err := dupFiles(files)
		if err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		r, err := c.exchange(ctx, tc.pkt, unix.UnixRights(fds...))
		c.mu.Unlock()
		for _, fd := range fds {
			unix.Close(fd)
		}
		if err != nil || r.Op != "ERROR" {
			t.Errorf("%v with %d fds: %+v %v, want an ERROR", tc.pkt.Fields, tc.fds, r, err)
			continue
		}
		if msg, _ := r.Get("msg"); !strings.Contains(msg, tc.want) {
			t.Errorf("%v with %d fds: %q, want %q", tc.pkt.Fields, tc.fds, msg, tc.want)
		}
	}
	// The init still serves.
	if r := s.run(t, ExecRequest{Args: []string{"echo", "ok"}}); r.err != nil || r.stdout != "ok\n" {
		t.Errorf("exec after bad requests: %+v", r)
	}
}
