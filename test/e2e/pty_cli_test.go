package e2e

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/pkg/api"
)

// cliTerm is the dsec CLI running on a terminal the test owns (a pty pair), as
// a user at a terminal runs it.
type cliTerm struct {
	master, slave *os.File
	cmd           *exec.Cmd
	scr           *screen
	exited        chan struct{}
	code          int
}

func (n *node) cliOnTerminal(t *testing.T, cols, rows int, args ...string) *cliTerm {
	t.Helper()
	master, slave, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	if err := pty.Setsize(master, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)}); err != nil {
		t.Fatal(err)
	}
	c := &cliTerm{master: master, slave: slave, scr: &screen{}, exited: make(chan struct{})}
	c.cmd = exec.Command(binPath, args...)
	c.cmd.Env = append(os.Environ(), "DSEC_ADDR=http://"+n.addr, "DSEC_TOKEN="+n.token)
	c.cmd.Stdin, c.cmd.Stdout, c.cmd.Stderr = slave, slave, slave
	// Its own session with the terminal as controlling terminal: dsec is the
	// foreground job, so SIGWINCH (and, were it not raw, SIGINT) reach it.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(c.scr, master) }()
	go func() {
		err := c.cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			c.code = ee.ExitCode()
		}
		close(c.exited)
	}()
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		<-c.exited
		master.Close()
		slave.Close()
	})
	return c
}

func (c *cliTerm) typeKeys(t *testing.T, keys string) {
	t.Helper()
	if _, err := c.master.WriteString(keys); err != nil {
		t.Fatal(err)
	}
}

// lflag is the local terminal's line discipline flags now.
func (c *cliTerm) lflag(t *testing.T) uint32 {
	t.Helper()
	tio, err := unix.IoctlGetTermios(int(c.slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	return tio.Lflag
}

const cooked = unix.ECHO | unix.ICANON | unix.ISIG

func (c *cliTerm) wantRaw(t *testing.T) {
	t.Helper()
	if l := c.lflag(t); l&cooked != 0 {
		t.Fatalf("local terminal not in raw mode: lflag %#x", l)
	}
}

func (c *cliTerm) wantRestored(t *testing.T) {
	t.Helper()
	if l := c.lflag(t); l&cooked != cooked {
		t.Fatalf("local terminal not restored: lflag %#x", l)
	}
}

// wait waits for dsec to exit and returns its exit code.
func (c *cliTerm) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-c.exited:
		return c.code
	case <-time.After(30 * time.Second):
		t.Fatalf("dsec did not exit; terminal shows %q", c.scr.all())
		return -1
	}
}

// TestPTYCLI: `dsec exec -t` without a local terminal, then `dsec exec -it` and
// `dsec shell` driven through a real terminal: raw mode (and its restore), the
// window size and its changes, Ctrl-C for the sandbox's job, the exit code.
func TestPTYCLI(t *testing.T) {
	n := startNode(t)
	id := n.create(t, api.CreateSandboxRequest{})

	t.Run("exec -t without a local terminal", func(t *testing.T) {
		if out, errb, code := n.cli(t, "", "exec", "-t", id, "--", "tty"); code != 0 || !rxMatch(`^/dev/pts/\d+\r\n$`, out) {
			t.Fatalf("tty: %q %q %d", out, errb, code)
		}
		if out, _, code := n.cli(t, "", "exec", "-t", id, "--", "stty", "size"); code != 0 || out != "24 80\r\n" {
			t.Fatalf("default size: %q %d", out, code)
		}
		if out, _, code := n.cli(t, "", "exec", "-t", "--size", "100x30", id, "--", "stty", "size"); code != 0 || out != "30 100\r\n" {
			t.Fatalf("--size: %q %d", out, code)
		}
		if _, _, code := n.cli(t, "", "exec", "-t", id, "--", "sh", "-c", "exit 7"); code != 7 {
			t.Fatalf("exit code %d, want 7", code)
		}
		// -i -t with piped input: typed into the sandbox's terminal.
		if out, _, code := n.cli(t, "echo piped $((1+2))\nexit 4\n", "exec", "-i", "-t", id, "--", "sh"); code != 4 || !strings.Contains(out, "piped 3\r\n") {
			t.Fatalf("piped -it: %q %d", out, code)
		}
		// The end of the piped input is the end of the terminal's input (^D):
		// the shell exits.
		if out, _, code := n.cli(t, "echo last line\n", "exec", "-i", "-t", id, "--", "sh"); code != 0 || !strings.Contains(out, "last line\r\n") {
			t.Fatalf("piped -it to its end: %q %d", out, code)
		}
		for _, c := range []struct{ args []string }{
			{[]string{"exec", "-t", "--size", "0x5", id, "--", "true"}},
			{[]string{"exec", "-t", "--size", "80x", id, "--", "true"}},
			{[]string{"exec", "-t", "--size", "70000x24", id, "--", "true"}},
			{[]string{"exec", "-t", "--size", "80x24x1", id, "--", "true"}},
			{[]string{"exec", "--size", "80x24", id, "--", "true"}},
		} {
			if _, errb, code := n.cli(t, "", c.args...); code != 1 || !strings.Contains(errb, "--size") {
				t.Errorf("%v: code %d, stderr %q; want 1 and a message about --size", c.args, code, errb)
			}
		}
	})

	t.Run("exec -it on a terminal", func(t *testing.T) {
		c := n.cliOnTerminal(t, 100, 30, "exec", "-it", "-e", "PS1=$ ", id, "--", "sh", "-i")
		c.scr.expect(t, `\$ $`)
		c.wantRaw(t)
		// One echo (the sandbox's terminal), none from the local raw terminal.
		c.typeKeys(t, "stty size\r")
		c.scr.expect(t, `^stty size\r\n30 100\r\n\$ $`)
		// The window follows the local terminal.
		if err := pty.Setsize(c.master, &pty.Winsize{Cols: 120, Rows: 50}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			c.typeKeys(t, "stty size\r")
			g := c.scr.expect(t, `stty size\r\n(\d+ \d+)\r\n\$ $`)
			if g[1] == "50 120" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("size after the local resize: %s, want 50 120", g[1])
			}
			time.Sleep(50 * time.Millisecond)
		}
		// Ctrl-C is a byte for the sandbox's foreground job, not a signal to dsec.
		c.typeKeys(t, "sleep 100\r")
		c.scr.expect(t, `sleep 100\r\n`)
		waitSandboxProc(t, id, true, "sleep", "100")
		c.typeKeys(t, "\x03")
		c.scr.expect(t, `\$ $`)
		waitSandboxProc(t, id, false, "sleep", "100")
		c.typeKeys(t, "echo alive\r")
		c.scr.expect(t, `alive\r\n\$ $`)
		c.typeKeys(t, "exit 5\r")
		if code := c.wait(t); code != 5 {
			t.Fatalf("exit code %d, want 5", code)
		}
		c.wantRestored(t)
	})

	t.Run("--size on a terminal", func(t *testing.T) {
		c := n.cliOnTerminal(t, 100, 30, "exec", "-it", "--size", "33x11", id, "--", "sh", "-c", "stty size; read x; stty size")
		c.scr.expect(t, `11 33\r\n`)
		_ = pty.Setsize(c.master, &pty.Winsize{Cols: 120, Rows: 50}) // not followed: the size is explicit
		time.Sleep(300 * time.Millisecond)
		c.typeKeys(t, "\r")
		c.scr.expect(t, `11 33\r\n`)
		if code := c.wait(t); code != 0 {
			t.Fatalf("exit code %d", code)
		}
	})

	t.Run("terminal restored on signals", func(t *testing.T) {
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT} {
			c := n.cliOnTerminal(t, 80, 24, "exec", "-it", "-e", "PS1=$ ", id, "--", "sh", "-i")
			c.scr.expect(t, `\$ $`)
			c.wantRaw(t)
			_ = c.cmd.Process.Signal(sig)
			c.wait(t)
			c.wantRestored(t)
		}
	})

	t.Run("shell", func(t *testing.T) {
		c := n.cliOnTerminal(t, 90, 25, "shell", id)
		c.scr.expect(t, `# $`)
		c.wantRaw(t)
		c.typeKeys(t, "shopt -q login_shell && echo login $0 $(stty size)\r")
		c.scr.expect(t, `login bash 25 90\r\n`)
		c.typeKeys(t, "exit\r")
		if code := c.wait(t); code != 0 {
			t.Fatalf("exit code %d", code)
		}
		c.wantRestored(t)
	})

	t.Run("shell without bash", func(t *testing.T) {
		if _, err := os.Stat(imagesDir + "/busybox/image.json"); err != nil {
			t.Skip("busybox image missing (run `make setup`)")
		}
		bb := n.create(t, api.CreateSandboxRequest{Image: "busybox"})
		c := n.cliOnTerminal(t, 90, 25, "shell", bb)
		c.scr.expect(t, `~ # `) // busybox ash then asks the terminal for the cursor position (ESC [6n)
		c.typeKeys(t, "echo shell=$0\r")
		c.scr.expect(t, `shell=sh\r\n`)
		c.typeKeys(t, "exit\r")
		if code := c.wait(t); code != 0 {
			t.Fatalf("exit code %d", code)
		}
	})
}

func rxMatch(pattern, s string) bool { return regexp.MustCompile(pattern).MatchString(s) }
