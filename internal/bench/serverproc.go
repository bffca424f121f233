package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dsec-dev/dsec/pkg/client"
)

// serverProc is a `dsec server` run as its own process, as a user runs it: the
// benchmarks that measure the HTTP API, the CLI or the server's own memory
// talk to it and never share its address space.
type serverProc struct {
	Bin     string // the dsec binary
	Addr    string // http://127.0.0.1:PORT
	Token   string
	DataDir string
	cmd     *exec.Cmd
	exited  chan struct{} // closed once the process has been waited for
	logs    *os.File      // the server's output (a temp file, removed by stop)
	owned   bool          // DataDir was made here and is removed by stop
}

// startServer runs `bin server` on a loopback port and dataDir ("" = a new
// directory under /var/lib/dsec, removed by stop) with extra flags, and waits
// until it answers.
func startServer(ctx context.Context, bin, dataDir string, args ...string) (*serverProc, error) {
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("bench: find the dsec binary: %w", err)
		}
		bin = exe
	}
	s := &serverProc{Bin: bin, DataDir: dataDir}
	if s.DataDir == "" {
		if err := os.MkdirAll("/var/lib/dsec", 0o700); err != nil {
			return nil, err
		}
		d, err := os.MkdirTemp("/var/lib/dsec", "bench-server-")
		if err != nil {
			return nil, err
		}
		s.DataDir, s.owned = d, true
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	s.Addr = "http://" + addr
	s.cmd = exec.Command(bin, append([]string{"server", "--listen", addr, "--data-dir", s.DataDir}, args...)...)
	if s.logs, err = os.CreateTemp("", "dsec-bench-server-*.log"); err != nil {
		s.removeDir()
		return nil, err
	}
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		s.removeDir()
		return nil, fmt.Errorf("bench: start %s server: %w", bin, err)
	}
	s.exited = make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(filepath.Join(s.DataDir, "token")); err == nil && len(b) > 0 {
			s.Token = strings.TrimSpace(string(b))
			if _, err := client.New(s.Addr, s.Token).Info(ctx); err == nil {
				return s, nil
			}
		}
		select {
		case <-s.exited:
			s.removeDir()
			return nil, fmt.Errorf("bench: dsec server exited: %s", s.output())
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.stop()
			return nil, fmt.Errorf("bench: dsec server did not come up: %s", s.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Client returns an API client of the server (retries as configured by opts).
func (s *serverProc) Client(opts ...client.Option) *client.Client {
	return client.New(s.Addr, s.Token, opts...)
}

// Pid is the server's process ID.
func (s *serverProc) Pid() int { return s.cmd.Process.Pid }

// deleteAll deletes every sandbox the server lists, with p workers.
func (s *serverProc) deleteAll(ctx context.Context, p int) error {
	cl := s.Client()
	sbs, err := cl.List(ctx)
	if err != nil {
		return err
	}
	_, _, failures, first := runLoad(ctx, len(sbs), p, false, func(_, i int) error {
		return cl.Delete(ctx, sbs[i].ID)
	})
	if failures > 0 {
		return fmt.Errorf("bench: %d deletes failed, first: %w", failures, first)
	}
	return nil
}

// stop ends the server with SIGTERM (SIGKILL after 60 s) and removes the data
// dir if it was made here. Sandboxes still running keep running: call deleteAll
// first.
func (s *serverProc) stop() {
	if s.exited != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(60 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	}
	s.removeDir()
}

func (s *serverProc) removeDir() {
	if s.owned {
		_ = os.RemoveAll(s.DataDir)
	}
	if s.logs != nil {
		s.logs.Close()
		os.Remove(s.logs.Name())
	}
}

// output is the server's output so far (its last 8 KiB).
func (s *serverProc) output() string {
	b, _ := os.ReadFile(s.logs.Name())
	return string(b[max(0, len(b)-8<<10):])
}

// rssKB is VmRSS of pid in KiB (0 when unreadable).
func rssKB(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// clientBinary is the dsec client that belongs to bin: bin itself, unless bin
// is dsecd (which runs no client command) with a dsec beside it.
func clientBinary(bin string) string {
	dir, base := filepath.Split(bin)
	suffix, ok := strings.CutPrefix(base, "dsecd")
	if !ok {
		return bin
	}
	c := filepath.Join(dir, "dsec"+suffix)
	if st, err := os.Stat(c); err == nil && st.Mode().IsRegular() {
		return c
	}
	return bin
}
