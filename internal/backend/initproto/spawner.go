package initproto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Spawner clones sandbox inits from a helper process with a tiny descriptor
// table (`dsec-init spawner`, csrc/init/spawner.h) instead of from the
// server. A fork+exec copies the forking process's whole descriptor table and
// closes every close-on-exec entry again at exec, and the server holds one
// descriptor per live sandbox (its pidfd): profiles at 3,500 live sandboxes
// showed that copy and close taking a tenth of the create CPU, growing with
// every sandbox. The helper clones with CLONE_PARENT, so each init is still the
// server's child (reaped by it, its SIGCHLD goes to it).
//
// Only inits without a user namespace or a cgroup v2 directory go this way
// (those need the parent's uid maps and clone3); the others, and every spawn
// after the helper failed, use syscall.ForkExec.
//
// A helper lives in a template mount namespace of its own (its root an empty
// read-only tmpfs, nothing of the host; see csrc/init/spawner.h) where the
// kernel allows: an init cloned from it copies two mounts instead of the
// host's table and switches to its root without pivot_root, whose walk over
// every task of the host grew with the number of live sandboxes. Such an
// init gets its layers as mount fds (see Spawn).
type Spawner struct {
	// free holds the helpers not serving a request (one per CPU: a clone
	// with new namespaces takes a while, and creates run in parallel).
	free chan *helper
	all  []*helper
	path string // the init binary the helpers run (template helpers run no other)
}

// helper is one `dsec-init spawner` process.
type helper struct {
	conn *os.File // our end of the SOCK_SEQPACKET pair; nil once broken
	pid  int
	// template: the helper runs in its template mount namespace
	template bool
}

// spawnPathMax is the size of struct spawn_req's path.
const spawnPathMax = 4096

// spawnCgroupBit is SPAWN_CGROUP_BIT: the request's mask bit for a cgroup fd
// after the init's.
const spawnCgroupBit = 8

// StartSpawner starts n helpers (n < 1: one per CPU) from the init binary at
// initPath.
func StartSpawner(initPath string, n int) (*Spawner, error) {
	return startSpawner(initPath, n, spawnAnswerTimeout)
}

func startSpawner(initPath string, n int, answerTimeout time.Duration) (*Spawner, error) {
	if n < 1 {
		n = runtime.NumCPU()
	}
	s := &Spawner{free: make(chan *helper, n), path: initPath}
	for range n {
		h, err := startHelper(initPath, answerTimeout)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.all = append(s.all, h)
		s.free <- h
	}
	return s, nil
}

func startHelper(initPath string, answerTimeout time.Duration) (*helper, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("initproto: spawner socketpair: %w", err)
	}
	// A helper answers within a clone (well under a millisecond); one that has
	// not answered in answerTimeout is wedged (or is a dsec-init without the
	// spawner mode) and is given up instead of hanging the create.
	tv := unix.NsecToTimeval(answerTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fds[0], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, fmt.Errorf("initproto: spawner socket timeout: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "spawner"), os.NewFile(uintptr(fds[1]), "spawner-peer")
	defer theirs.Close()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		ours.Close()
		return nil, fmt.Errorf("initproto: %w", err)
	}
	defer null.Close()
	// the template tmpfs is mounted on the binary's directory, in the
	// helper's own mount namespace only
	pid, err := syscall.ForkExec(initPath, []string{"dsec-init", "spawner", filepath.Dir(initPath)}, &syscall.ProcAttr{
		Env:   []string{},
		Files: []uintptr{null.Fd(), null.Fd(), null.Fd(), theirs.Fd()},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		ours.Close()
		return nil, fmt.Errorf("initproto: start spawner: %w", err)
	}
	h := &helper{conn: ours, pid: pid}
	mode := make([]byte, 1)
	for {
		n, _, _, _, err := unix.Recvmsg(fds[0], mode, nil, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n != 1 || (mode[0] != 'T' && mode[0] != 'P') {
			// wedged, or not a spawner at all: every spawn through it
			// falls back to ForkExec (Close reaps it)
			h.broken()
			return h, nil
		}
		break
	}
	h.template = mode[0] == 'T'
	return h, nil
}

// Close ends the helpers (each exits when its socket closes) and reaps them.
// Spawns in flight finish first.
func (s *Spawner) Close() error {
	if s == nil {
		return nil
	}
	for range s.all {
		h := <-s.free
		if h.conn != nil {
			h.conn.Close()
			h.conn = nil
		}
		var ws syscall.WaitStatus
		for {
			_, err := syscall.Wait4(h.pid, &ws, 0, nil)
			if !errors.Is(err, syscall.EINTR) {
				break
			}
		}
	}
	s.all = nil
	return nil
}

// spawnAnswerTimeout bounds the wait for a spawner helper's answer.
const spawnAnswerTimeout = 10 * time.Second

// errSpawnerGone says the helper is not usable: fall back to ForkExec.
var errSpawnerGone = errors.New("initproto: spawner is gone")

// Template reports whether the spawner's helpers clone inits of path from
// their template namespace.
func (s *Spawner) Template(path string) bool {
	return s != nil && path == s.path && len(s.all) > 0 && s.all[0].template
}

// spawn clones path with clone flags and the given fds (index = the init's fd
// number, ^uintptr(0) = none), into the cgroup v2 directory cgroupFD when it
// is not -1, returning the new pid and whether it was cloned from the
// template namespace. errSpawnerGone: nothing was started, use ForkExec.
// tmplOK: the caller can start an init in the template (else a template
// helper refuses with errSpawnerGone).
func (s *Spawner) spawn(path string, flags uint32, files []uintptr, cgroupFD int, tmplOK bool) (int, bool, error) {
	if s == nil || len(path) >= spawnPathMax || len(files) > 8 {
		return 0, false, errSpawnerGone
	}
	req := make([]byte, 8+spawnPathMax)
	var mask uint32
	var fds []int
	for i, f := range files {
		if f != ^uintptr(0) {
			mask |= 1 << i
			fds = append(fds, int(f))
		}
	}
	if cgroupFD >= 0 {
		mask |= 1 << spawnCgroupBit
		fds = append(fds, cgroupFD)
	}
	binary.LittleEndian.PutUint32(req[0:], flags)
	binary.LittleEndian.PutUint32(req[4:], mask)
	copy(req[8:], path)
	if len(s.all) == 0 {
		return 0, false, errSpawnerGone
	}
	h := <-s.free
	defer func() { s.free <- h }()
	if h.conn == nil || (h.template && (!tmplOK || path != s.path)) {
		return 0, false, errSpawnerGone
	}
	fd := int(h.conn.Fd())
	if err := unix.Sendmsg(fd, req, unix.UnixRights(fds...), nil, 0); err != nil {
		h.broken()
		return 0, false, errSpawnerGone
	}
	ans := make([]byte, 8)
	for {
		n, _, _, _, err := unix.Recvmsg(fd, ans, nil, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n != len(ans) {
			// the request may have started an init we cannot name: it
			// fails its handshake (its config pipe closes) and exits
			h.broken()
			if errors.Is(err, unix.EAGAIN) {
				return 0, false, errSpawnerGone // timed out: ForkExec this one
			}
			return 0, false, fmt.Errorf("initproto: spawner answer: %v (%d bytes)", err, n)
		}
		break
	}
	// The answer comes right after the clone: a child that then cannot
	// exec says so on its status pipe ("ERR spawn: exec ...") and exits,
	// and the handshake reports it like any other failed setup.
	pid := int(int32(binary.LittleEndian.Uint32(ans[0:])))
	if e := syscall.Errno(binary.LittleEndian.Uint32(ans[4:])); e != 0 {
		return 0, false, fmt.Errorf("initproto: start %s: clone: %w", path, e)
	}
	return pid, h.template, nil
}

func (h *helper) broken() {
	if h.conn != nil {
		h.conn.Close()
		h.conn = nil
	}
	// A helper that failed a request (wedged, or not a spawner at all) is no
	// use: end it now rather than leave Close waiting for it (Close reaps it).
	_ = syscall.Kill(h.pid, syscall.SIGKILL)
}

// spawnable reports whether sys can go through a Spawner: anything but a user
// namespace (a clone into a cgroup v2 directory, UseCgroupFD, can).
func spawnable(sys *syscall.SysProcAttr) bool {
	return sys.Cloneflags&syscall.CLONE_NEWUSER == 0 && sys.Credential == nil &&
		len(sys.UidMappings) == 0 && len(sys.GidMappings) == 0
}
