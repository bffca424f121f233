package fncall

import (
	"crypto/sha256"
	_ "embed" // the zygote binary
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

//go:generate sh build.sh

//go:embed dsec-fncall
var zygoteBinary []byte

// installZygote writes the embedded zygote into dir under a content-addressed name.
func installZygote(dir string) (string, error) {
	sum := sha256.Sum256(zygoteBinary)
	path := filepath.Join(dir, "dsec-fncall-"+hex.EncodeToString(sum[:6]))
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, ".dsec-fncall-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(zygoteBinary); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	return path, os.Rename(tmp.Name(), path)
}

// Wire protocol with csrc/fncall/dsec-fncall.c (struct req, struct ev).
const (
	opRun     = 1
	opKill    = 2
	opPrepare = 3
	opStatus  = 4

	evStarted  = 1
	evSetupErr = 2
	evExecErr  = 3
	evExit     = 4
	evReaped   = 5
	evFatal    = 6
	evTrace    = 7 // DSEC_FNCALL_TRACE=1: the helper's setup steps in µs
	evPrepared = 8
	evStatus   = 9 // pid: the helpers that are not idle

	flagProc        = 1
	flagLateSeccomp = 2 // bindfile.go

	reqHeaderSize = 4 + 4 + 8 + 4 + 4 + 4 + 4 + 8*6 + 4*4
	evSize        = 4 + 4 + 8 + 4 + 4 + 8*3 + 80
	maxFiles      = 64
	maxMsg        = 256 * 1024

	// The run gates: one 32-bit word per slot in a memory file the zygote
	// maps too (and with it its helpers and, until their execve, their
	// programs). The engine arms a slot's gate before it sends a request
	// and opens it (go or canceled) once the send returned; the program
	// waits for that right before its execve (see csrc/fncall).
	gateArmed    = 0
	gateGo       = 1
	gateCanceled = 2
	gateWaiting  = 3 // the program sleeps on the word (futex)
	gatesSize    = 4096
	futexWake    = 1
)

// event is one struct ev.
type event struct {
	kind     uint32
	err      int32
	id       uint64
	pid      int32
	status   int32
	utimeUs  int64
	stimeUs  int64
	maxRSSKB int64
	msg      string
}

func parseEvent(b []byte) (event, error) {
	if len(b) != evSize {
		return event{}, fmt.Errorf("fncall: event of %d bytes, want %d", len(b), evSize)
	}
	le := binary.LittleEndian
	e := event{
		kind: le.Uint32(b[0:]), err: int32(le.Uint32(b[4:])), id: le.Uint64(b[8:]),
		pid: int32(le.Uint32(b[16:])), status: int32(le.Uint32(b[20:])),
		utimeUs: int64(le.Uint64(b[24:])), stimeUs: int64(le.Uint64(b[32:])), maxRSSKB: int64(le.Uint64(b[40:])),
	}
	m := b[48:]
	if i := indexByte(m, 0); i >= 0 {
		m = m[:i]
	}
	e.msg = string(m)
	return e, nil
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

// runReq is one struct req plus its strings.
type runReq struct {
	op, slot       uint32
	id             uint64
	uid, gid       uint32
	flags          uint32
	rlCPU, rlFsize uint64
	rlNproc        uint64
	rlNofile       uint64
	rlStack        uint64
	tmpfsSize      uint64
	argv, env      []string
	cwd            string
	files          []string // "MODE:NAME"
}

func (r *runReq) encode() ([]byte, error) {
	var s []byte
	for _, l := range [][]string{r.argv, r.env, {r.cwd}, r.files} {
		for _, x := range l {
			if indexByte([]byte(x), 0) >= 0 {
				return nil, errors.New("NUL byte in argument, environment or file name")
			}
			s = append(s, x...)
			s = append(s, 0)
		}
	}
	b := make([]byte, reqHeaderSize, reqHeaderSize+len(s))
	le := binary.LittleEndian
	le.PutUint32(b[0:], r.op)
	le.PutUint32(b[4:], r.slot)
	le.PutUint64(b[8:], r.id)
	le.PutUint32(b[16:], r.uid)
	le.PutUint32(b[20:], r.gid)
	le.PutUint32(b[24:], r.flags)
	le.PutUint32(b[28:], uint32(len(r.files)))
	for i, v := range []uint64{r.rlCPU, r.rlFsize, r.rlNproc, r.rlNofile, r.rlStack, r.tmpfsSize} {
		le.PutUint64(b[32+8*i:], v)
	}
	le.PutUint32(b[80:], uint32(len(r.argv)))
	le.PutUint32(b[84:], uint32(len(r.env)))
	le.PutUint32(b[88:], uint32(len(s)))
	b = append(b, s...)
	if len(b) > maxMsg {
		return nil, errors.New("request too large for the zygote")
	}
	return b, nil
}

// zygote is one running dsec-fncall process and its control connection.
type zygote struct {
	cmd  *exec.Cmd
	conn *net.UnixConn
	dead chan struct{}
	// reqs are the engine's ends of the slots' request sockets: a run's
	// request goes straight to the slot's prepared helper.
	reqs []int
	// gates is the run gates' mapping (nil once closed).
	gatesMu sync.RWMutex
	gates   []byte

	mu      sync.Mutex
	pending map[uint64]chan event
	err     error // why the zygote died
}

// startZygote starts a zygote on rootfs with the slots' cgroup.procs files.
func startZygote(path, rootfs, stage string, nslots int, cgFiles [][]*os.File, seccompFD *os.File) (*zygote, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("fncall: socketpair: %w", err)
	}
	parent := os.NewFile(uintptr(fds[0]), "fncall-ctl")
	child := os.NewFile(uintptr(fds[1]), "fncall-ctl-child")
	defer child.Close()
	ncg := 0
	if len(cgFiles) > 0 {
		ncg = len(cgFiles[0])
	}
	extra := []*os.File{child, seccompFD}
	for _, s := range cgFiles {
		extra = append(extra, s...)
	}
	reqs := make([]int, 0, nslots)
	closeReqs := func() {
		for _, fd := range reqs {
			unix.Close(fd)
		}
	}
	for range nslots {
		p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			parent.Close()
			closeReqs()
			return nil, fmt.Errorf("fncall: socketpair: %w", err)
		}
		reqs = append(reqs, p[0])
		c := os.NewFile(uintptr(p[1]), "fncall-slot")
		defer c.Close()
		extra = append(extra, c)
	}
	gatesFile, gates, err := mapGates()
	if err != nil {
		parent.Close()
		closeReqs()
		return nil, err
	}
	defer gatesFile.Close()
	extra = append(extra, gatesFile)
	cmd := exec.Command(path, rootfs, stage, strconv.Itoa(nslots), strconv.Itoa(ncg))
	cmd.ExtraFiles = extra
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: unix.CLONE_NEWNS | unix.CLONE_NEWNET | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC,
		Setsid:     true,
	}
	if err := cmd.Start(); err != nil {
		parent.Close()
		closeReqs()
		_ = unix.Munmap(gates)
		return nil, fmt.Errorf("fncall: start zygote: %w", err)
	}
	fc, err := net.FileConn(parent)
	parent.Close()
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		closeReqs()
		_ = unix.Munmap(gates)
		return nil, fmt.Errorf("fncall: zygote connection: %w", err)
	}
	z := &zygote{cmd: cmd, conn: fc.(*net.UnixConn), dead: make(chan struct{}), pending: map[uint64]chan event{}, reqs: reqs,
		gates: gates}
	ready := make(chan event, 1)
	z.pending[0] = ready
	go z.readLoop()
	go func() {
		err := cmd.Wait()
		z.fail(fmt.Errorf("fncall: zygote exited: %v", err))
		z.conn.Close()
	}()
	select {
	case e := <-ready:
		if e.kind != evStarted {
			z.close()
			return nil, fmt.Errorf("fncall: zygote setup: %s: %s", e.msg, syscall.Errno(e.err))
		}
	case <-z.dead:
		z.close()
		return nil, z.deadErr()
	case <-time.After(30 * time.Second):
		z.close()
		return nil, errors.New("fncall: zygote did not start in 30 s")
	}
	return z, nil
}

// mapGates makes the run gates' memory file and maps it.
func mapGates() (*os.File, []byte, error) {
	fd, err := unix.MemfdCreate("fncall-gates", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, nil, fmt.Errorf("fncall: run gates: %w", err)
	}
	f := os.NewFile(uintptr(fd), "fncall-gates")
	if err := unix.Ftruncate(fd, gatesSize); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("fncall: run gates: %w", err)
	}
	m, err := unix.Mmap(fd, 0, gatesSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("fncall: run gates: %w", err)
	}
	return f, m, nil
}

// setGate stores v in slot's run gate and wakes a program waiting on it;
// false once the zygote was closed.
func (z *zygote) setGate(slot uint32, v uint32) bool {
	z.gatesMu.RLock()
	defer z.gatesMu.RUnlock()
	if z.gates == nil || int(slot) >= len(z.reqs) {
		return false
	}
	g := (*uint32)(unsafe.Pointer(&z.gates[4*slot]))
	if atomic.SwapUint32(g, v) == gateWaiting {
		_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(g)), futexWake, 1, 0, 0, 0)
	}
	return true
}

// armGate makes the next program on slot wait for openGate (before the
// run's request is sent).
func (z *zygote) armGate(slot uint32) { z.setGate(slot, gateArmed) }

// openGate lets slot's program run, or, when canceled, has it end killed
// before it ran an instruction of its own (after the request was sent).
func (z *zygote) openGate(slot uint32, canceled bool) {
	v := uint32(gateGo)
	if canceled {
		v = gateCanceled
	}
	z.setGate(slot, v)
}

func (z *zygote) deadErr() error {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.err != nil {
		return z.err
	}
	return errors.New("fncall: zygote died")
}

func (z *zygote) fail(err error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.err != nil {
		return
	}
	z.err = err
	close(z.dead)
}

func (z *zygote) readLoop() {
	buf := make([]byte, evSize+64)
	for {
		n, _, flags, _, err := z.conn.ReadMsgUnix(buf, nil)
		if err != nil || n == 0 {
			if err == nil {
				err = errors.New("EOF")
			}
			z.fail(fmt.Errorf("fncall: zygote connection: %w", err))
			return
		}
		if flags&unix.MSG_TRUNC != 0 {
			continue
		}
		e, err := parseEvent(buf[:n])
		if err != nil {
			continue
		}
		if e.kind == evFatal {
			z.fail(fmt.Errorf("fncall: zygote: %s: %s", e.msg, syscall.Errno(e.err)))
			z.mu.Lock()
			ch := z.pending[0]
			z.mu.Unlock()
			if ch != nil {
				select {
				case ch <- e:
				default:
				}
			}
			return
		}
		z.mu.Lock()
		ch := z.pending[e.id]
		if e.id == 0 {
			delete(z.pending, 0)
		}
		z.mu.Unlock()
		if ch != nil {
			ch <- e // buffered: a run gets at most 4 events
		}
	}
}

// start sends a run request to its slot's helper; events for it arrive on
// the returned channel.
func (z *zygote) start(r *runReq, fds []int) (chan event, error) {
	b, err := r.encode()
	if err != nil {
		return nil, err
	}
	if int(r.slot) >= len(z.reqs) {
		return nil, fmt.Errorf("fncall: no slot %d", r.slot)
	}
	ch := make(chan event, 8)
	z.mu.Lock()
	if z.err != nil {
		z.mu.Unlock()
		return nil, z.err
	}
	z.pending[r.id] = ch
	z.mu.Unlock()
	if err := unix.Sendmsg(z.reqs[r.slot], b, unix.UnixRights(fds...), nil, 0); err != nil {
		z.forget(r.id)
		return nil, fmt.Errorf("fncall: send to sandbox helper: %w", err)
	}
	return ch, nil
}

// prepare has the zygote replace slot's helper by one for r's namespace
// parameters (uid, gid, tmpfs size, /proc), before r is sent.
func (z *zygote) prepare(r *runReq) error {
	p := runReq{op: opPrepare, slot: r.slot, id: r.id, uid: r.uid, gid: r.gid, flags: r.flags, tmpfsSize: r.tmpfsSize}
	b, err := p.encode()
	if err != nil {
		return err
	}
	ch := make(chan event, 2)
	z.mu.Lock()
	if z.err != nil {
		z.mu.Unlock()
		return z.err
	}
	z.pending[r.id] = ch
	z.mu.Unlock()
	defer z.forget(r.id)
	if _, _, err := z.conn.WriteMsgUnix(b, nil, nil); err != nil {
		return fmt.Errorf("fncall: send to zygote: %w", err)
	}
	select {
	case e := <-ch:
		if e.kind != evPrepared {
			return fmt.Errorf("fncall: prepare sandbox: %s: %s", e.msg, syscall.Errno(e.err))
		}
		return nil
	case <-z.dead:
		return z.deadErr()
	}
}

// busy asks the zygote how many of its helpers are not idle: running a
// request, still setting up their sandbox, or ended and not yet reaped.
// id must be unique among the zygote's requests.
func (z *zygote) busy(id uint64) (int, error) {
	b, err := (&runReq{op: opStatus, id: id}).encode()
	if err != nil {
		return 0, err
	}
	ch := make(chan event, 1)
	z.mu.Lock()
	if z.err != nil {
		z.mu.Unlock()
		return 0, z.err
	}
	z.pending[id] = ch
	z.mu.Unlock()
	defer z.forget(id)
	if _, _, err := z.conn.WriteMsgUnix(b, nil, nil); err != nil {
		return 0, fmt.Errorf("fncall: send to zygote: %w", err)
	}
	select {
	case e := <-ch:
		if e.kind != evStatus {
			return 0, fmt.Errorf("fncall: zygote status: %s: %s", e.msg, syscall.Errno(e.err))
		}
		return int(e.pid), nil
	case <-z.dead:
		return 0, z.deadErr()
	}
}

func (z *zygote) forget(id uint64) {
	z.mu.Lock()
	delete(z.pending, id)
	z.mu.Unlock()
}

// kill asks the zygote to SIGKILL a run's pid-namespace init (and with it every
// process of the run), or to drop its request if no helper took it yet.
// Killing a run that already ended does nothing.
func (z *zygote) kill(id uint64, slot uint32) {
	r := runReq{op: opKill, id: id, slot: slot}
	b, _ := r.encode()
	_, _, _ = z.conn.WriteMsgUnix(b, nil, nil)
}

func (z *zygote) close() {
	z.conn.Close() // the zygote kills every run and exits on EOF
	select {
	case <-z.dead:
	case <-time.After(5 * time.Second):
		_ = z.cmd.Process.Kill()
		<-z.dead
	}
	z.gatesMu.Lock()
	for _, fd := range z.reqs {
		unix.Close(fd)
	}
	z.reqs = nil
	if z.gates != nil {
		_ = unix.Munmap(z.gates)
		z.gates = nil
	}
	z.gatesMu.Unlock()
}
