package lazy

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The holder keeps layerd's FUSE connection alive across a layerd crash.
//
// A FUSE mount lives as long as some process holds its /dev/fuse descriptor. The
// holder is a small process (this same binary, started by layerd with Setsid) that
// holds a copy of the descriptor and does nothing else with it; when layerd dies
// (kill -9, a crash), the mounts stay up and readers simply wait in the kernel. The
// holder then starts layerd again, which connects to the holder's socket, receives
// the descriptor (SCM_RIGHTS), re-reads its state (state.go), asks the kernel to
// resend the requests its predecessor had read but not answered, and serves on.
//
// Each layerd keeps a connection to the holder open (the lifeline): its end is
// how the holder notices layerd is gone, and a clean exit sends a bye first. The
// holder exits on a bye, when the FUSE connection goes away (the mount was
// unmounted: poll reports POLLERR), or on SIGTERM; if the holder dies, layerd
// starts a new one. It never leaks past the mounts it holds.

// EnvHolder turns a process started by layerd into the holder (value: JSON holderConfig).
const EnvHolder = "DSEC_LAYERD_HOLDER"

// holderConfig is what the holder needs to start layerd again.
type holderConfig struct {
	Root string `json:"root"`
	Exe  string `json:"exe"`
	// Layerd is layerd's JSON config (EnvMain).
	Layerd string `json:"layerd"`
}

// Descriptors the holder inherits.
const (
	holderFuseFD = 3
	holderLinkFD = 4
)

// Lifeline messages.
const (
	msgFuse = 'F' // holder → layerd, with the descriptor
	msgBye  = 'B' // layerd → holder: exiting cleanly, stop holding
)

// HolderSocket is the holder's socket for a layers root.
func HolderSocket(root string) string {
	return strings.TrimSuffix(SocketPath(root), ".sock") + ".hold.sock"
}

// HolderPidPath is the holder's pid file.
func HolderPidPath(root string) string { return filepath.Join(root, "layerd-holder.pid") }

// holderLink is layerd's side of the lifeline.
type holderLink struct {
	conn  *net.UnixConn
	pid   int
	start time.Time
}

// bye tells the holder to stop holding and exit, and closes the link.
func (h *holderLink) bye() {
	if h == nil || h.conn == nil {
		return
	}
	_, _ = h.conn.Write([]byte{msgBye})
	_ = h.conn.Close()
}

// dialHolder connects to a running holder and receives the FUSE descriptor it
// holds (nil, -1 when there is none).
func dialHolder(root string) (*holderLink, int, error) {
	c, err := net.DialTimeout("unix", HolderSocket(root), 2*time.Second)
	if err != nil {
		return nil, -1, nil
	}
	uc := c.(*net.UnixConn)
	_ = uc.SetReadDeadline(time.Now().Add(5 * time.Second))
	fd, err := recvFD(uc)
	_ = uc.SetReadDeadline(time.Time{})
	if err != nil {
		uc.Close()
		return nil, -1, fmt.Errorf("holder: receive fuse descriptor: %w", err)
	}
	return &holderLink{conn: uc, pid: readPid(HolderPidPath(root))}, fd, nil
}

func recvFD(uc *net.UnixConn) (int, error) {
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		return -1, err
	}
	if n != 1 || buf[0] != msgFuse {
		return -1, errors.New("unexpected message")
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return -1, fmt.Errorf("no descriptor in message (%v)", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return -1, fmt.Errorf("no descriptor in message (%v)", err)
	}
	unix.CloseOnExec(fds[0])
	return fds[0], nil
}

func sendFD(uc *net.UnixConn, fd int) error {
	_, _, err := uc.WriteMsgUnix([]byte{msgFuse}, unix.UnixRights(fd), nil)
	return err
}

// startHolder starts a holder for fuseFD and returns the lifeline to it.
func startHolder(hc holderConfig, fuseFD int) (*holderLink, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("holder: socketpair: %w", err)
	}
	mine, theirs := os.NewFile(uintptr(pair[0]), "lifeline"), os.NewFile(uintptr(pair[1]), "lifeline")
	defer theirs.Close()
	logf, err := os.OpenFile(filepath.Join(hc.Root, "layerd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		mine.Close()
		return nil, fmt.Errorf("holder: log: %w", err)
	}
	defer logf.Close()
	hj, _ := json.Marshal(hc)
	cmd := exec.Command(hc.Exe, "layerd")
	cmd.Env = append(withoutEnv(os.Environ(), EnvMain), EnvHolder+"="+string(hj))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{os.NewFile(uintptr(fuseFD), "fuse"), theirs}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		mine.Close()
		return nil, fmt.Errorf("holder: start: %w", err)
	}
	pid := cmd.Process.Pid
	go func() { _ = cmd.Wait() }() // reap it if it dies while this layerd lives
	fc, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		return nil, fmt.Errorf("holder: lifeline: %w", err)
	}
	return &holderLink{conn: fc.(*net.UnixConn), pid: pid, start: time.Now()}, nil
}

func withoutEnv(env []string, key string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return out
}

func readPid(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// holder events.
type holderEvent int

const (
	evLinkUp holderEvent = iota
	evLinkDown
	evBye
	evChildExit
	evFuseGone
)

// holderRestartDelay is the first delay before the holder starts layerd again
// after a layerd it started died before connecting (a crash at start); it doubles
// up to holderMaxRestartDelay while that repeats. A layerd that connected and
// then died is started again at once.
const (
	holderRestartDelay    = 200 * time.Millisecond
	holderMaxRestartDelay = 5 * time.Second
)

// holderMain is the holder's main: it holds holderFuseFD, serves it to every
// layerd that connects, and starts layerd again when the last one is gone
// without saying bye.
func holderMain(hc holderConfig) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "layerd-holder", "pid", os.Getpid())
	unix.CloseOnExec(holderFuseFD)
	unix.CloseOnExec(holderLinkFD)
	sock := HolderSocket(hc.Root)
	ln, err := listenUnix(sock)
	if err != nil {
		log.Error("listen", "socket", sock, "err", err)
		return 1
	}
	defer os.Remove(sock)
	pidPath := HolderPidPath(hc.Root)
	_ = os.WriteFile(pidPath, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600)
	defer func() {
		if readPid(pidPath) == os.Getpid() {
			_ = os.Remove(pidPath)
		}
	}()

	ev := make(chan holderEvent, 16)
	watch := func(c net.Conn) {
		ev <- evLinkUp
		buf := make([]byte, 64)
		for {
			n, err := c.Read(buf)
			for _, b := range buf[:n] {
				if b == msgBye {
					ev <- evBye
				}
			}
			if err != nil {
				c.Close()
				ev <- evLinkDown
				return
			}
		}
	}
	if fc, err := net.FileConn(os.NewFile(holderLinkFD, "lifeline")); err == nil {
		go watch(fc)
	} else {
		log.Warn("no lifeline from the starting layerd", "err", err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if err := sendFD(c.(*net.UnixConn), holderFuseFD); err != nil {
				log.Warn("send fuse descriptor", "err", err)
				c.Close()
				continue
			}
			go watch(c)
		}
	}()
	go func() {
		// POLLERR once the FUSE connection is gone (unmounted or aborted).
		pfd := []unix.PollFd{{Fd: holderFuseFD}}
		for {
			if _, err := unix.Poll(pfd, -1); err != nil && !errors.Is(err, unix.EINTR) {
				log.Error("poll fuse", "err", err)
				break
			}
			if pfd[0].Revents&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) != 0 {
				break
			}
		}
		ev <- evFuseGone
	}()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)

	links, child := 0, false
	// connected: the last layerd started connected (started well); delay: the
	// backoff for layerds that die at start.
	connected, delay := true, time.Duration(0)
	var retry <-chan time.Time
	log.Info("holding", "root", hc.Root)
	for {
		select {
		case <-stop:
			log.Info("stopped by signal")
			return 0
		case <-retry:
			retry = nil
		case e := <-ev:
			switch e {
			case evLinkUp:
				links++
				connected, delay = true, 0
			case evLinkDown:
				links--
			case evChildExit:
				child = false
			case evBye:
				log.Info("layerd exited cleanly: releasing the fuse connection")
				return 0
			case evFuseGone:
				log.Info("fuse connection gone")
				return 0
			}
		}
		if links > 0 || child || retry != nil {
			continue
		}
		if !connected {
			delay = min(max(2*delay, holderRestartDelay), holderMaxRestartDelay)
			log.Warn("layerd died at start: starting it again after a delay", "delay", delay)
			connected = true // the delay is taken once per failed start
			retry = time.After(delay)
			continue
		}
		connected = false
		log.Warn("layerd is gone: starting it again")
		cmd := exec.Command(hc.Exe, "layerd")
		cmd.Env = append(withoutEnv(os.Environ(), EnvHolder), EnvMain+"="+hc.Layerd)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			log.Error("start layerd", "err", err)
			retry = time.After(holderRestartDelay)
			continue
		}
		child = true
		go func() { _ = cmd.Wait(); ev <- evChildExit }()
	}
}

// listenUnix listens on the unix socket path, replacing a stale socket file.
func listenUnix(path string) (net.Listener, error) {
	_ = os.MkdirAll(filepath.Dir(path), 0o700)
	_ = os.Remove(path)
	return net.Listen("unix", path)
}
