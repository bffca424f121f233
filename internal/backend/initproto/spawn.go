package initproto

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
)

// cloneFlags are the namespaces every sandbox init gets. The cgroup namespace
// is unshared by the init itself, after the caller placed it in its cgroups.
const cloneFlags = syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWUTS |
	syscall.CLONE_NEWIPC | syscall.CLONE_NEWNET

// SpawnConfig describes one sandbox init.
type SpawnConfig struct {
	InitPath string // the installed dsec-init binary (see initbin.Install)
	Hostname string
	RootDir  string   // host dir, existing and empty: the overlay mountpoint
	RWDir    string   // host dir, existing and empty: tmpfs for upper and work
	RWSize   int64    // bytes of the writable layer
	Lower    []string // read-only layers, top-most first, at least one
	// SysfsPath is a shared read-only sysfs mount (see MountSharedSysfs)
	// that the init clones onto /sys, keeping SysfsNetnsPath(SysfsPath)
	// open; empty: the init mounts its own sysfs.
	SysfsPath string
	// SocketPath is where the control socket is created (a stale file is
	// removed first), mode 0600. It must be shorter than 108 bytes. After a
	// successful Spawn the caller removes it once the init is gone.
	SocketPath string
	// Seccomp holds a raw struct sock_filter array; nil or empty: no filter.
	// The file is read with pread, so one file can serve many inits.
	Seccomp *os.File
	LogPath string // init diagnostics are appended here
	// CgroupFD is a cgroup v2 directory fd the init is cloned into
	// (CLONE_INTO_CGROUP); -1 (or 0) for none.
	CgroupFD int
	// Security is the policy the init applies; nil means DefaultSecurity.
	Security *Security
	// UserNS, if set, clones the init into a new user namespace too, with
	// this map: sandbox root is then an unprivileged host uid. The lowers
	// are handed to the init as idmapped mounts (files keep their owners
	// inside), /dev nodes are binds of the host's. Needs SysfsPath; the
	// paths of InitPath, RootDir and RWDir must be searchable by others
	// (the init resolves them as the mapped uid).
	UserNS *IDMap
	// BeforeStart runs after the clone and before the init does anything,
	// e.g. to join v1 cgroups. Nil is fine.
	BeforeStart func(pid int) error
	// Spawner, if set, clones the init (see Spawner); nil: ForkExec.
	Spawner *Spawner
	// KSM makes the init call PR_SET_MEMORY_MERGE before it starts anything:
	// KSM may merge the pages of every process in the sandbox.
	KSM bool

	// template: the init was cloned from the spawner's template namespace
	// (set by Spawn): it gets its layers as fds and its mountpoints are the
	// template's, not RootDir and RWDir.
	template bool
}

// Init identifies a running sandbox init on the host.
type Init struct {
	PID       int
	StartTime uint64 // field 22 of /proc/PID/stat, see Alive
}

func (c *SpawnConfig) validate() error {
	if c.InitPath == "" || c.RootDir == "" || c.RWDir == "" || c.SocketPath == "" || c.LogPath == "" {
		return errors.New("initproto: InitPath, RootDir, RWDir, SocketPath and LogPath are required")
	}
	if len(c.Lower) == 0 {
		return errors.New("initproto: at least one lower layer is required")
	}
	if c.RWSize <= 0 {
		return errors.New("initproto: RWSize must be positive")
	}
	if len(c.SocketPath) >= 108 {
		return fmt.Errorf("initproto: socket path %q is too long for a unix socket", c.SocketPath)
	}
	if len(c.Hostname) > 64 {
		return fmt.Errorf("initproto: hostname %q is too long", c.Hostname)
	}
	if c.SysfsPath != "" && !filepath.IsAbs(c.SysfsPath) {
		return fmt.Errorf("initproto: sysfs path %q must be absolute", c.SysfsPath)
	}
	if c.UserNS != nil {
		if err := c.UserNS.validate(); err != nil {
			return err
		}
		if c.SysfsPath == "" {
			return errors.New("initproto: a user namespace needs the shared sysfs")
		}
	}
	if c.Security != nil {
		if err := c.Security.validate(); err != nil {
			return err
		}
	}
	for _, v := range append([]string{c.Hostname, c.RootDir, c.RWDir, c.SysfsPath}, c.Lower...) {
		if strings.ContainsAny(v, "\n\x00") {
			return fmt.Errorf("initproto: bad config value %q", v)
		}
	}
	// overlay's option syntax uses these as separators
	for _, p := range append([]string{c.RWDir}, c.Lower...) {
		if !filepath.IsAbs(p) || strings.ContainsAny(p, ",:\\") {
			return fmt.Errorf("initproto: layer path %q must be absolute and free of ',' ':' '\\'", p)
		}
	}
	return nil
}

func (c *SpawnConfig) configText() []byte {
	var b strings.Builder
	root, rw := c.RootDir, c.RWDir
	if c.template {
		root, rw = templateRoot, templateRW
		b.WriteString("template=1\n")
	}
	fmt.Fprintf(&b, "hostname=%s\nroot=%s\nrwdir=%s\nrwsize=%d\n", c.Hostname, root, rw, c.RWSize)
	for _, l := range c.Lower {
		fmt.Fprintf(&b, "lower=%s\n", l)
	}
	if c.SysfsPath != "" {
		fmt.Fprintf(&b, "sysfs=%s\nsysfsnet=%s\n", c.SysfsPath, SysfsNetnsPath(c.SysfsPath))
	}
	if c.KSM {
		b.WriteString("ksm=1\n")
	}
	sec := c.Security
	if sec == nil {
		d := DefaultSecurity()
		sec = &d
	}
	if c.UserNS != nil && sec.PingGroupRange != "" {
		// only groups mapped in the namespace can be given ping sockets
		cp := *sec
		cp.PingGroupRange = c.UserNS.clampRange(sec.PingGroupRange)
		sec = &cp
	}
	sec.configText(&b)
	if c.UserNS != nil {
		b.WriteString("userns=1\n")
	}
	return []byte(b.String())
}

// listen creates the control socket: SOCK_SEQPACKET, mode 0600.
func listen(path string) (int, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return -1, fmt.Errorf("initproto: remove stale socket: %w", err)
	}
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("initproto: socket: %w", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		syscall.Close(fd)
		return -1, fmt.Errorf("initproto: bind %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		syscall.Close(fd)
		os.Remove(path)
		return -1, fmt.Errorf("initproto: %w", err)
	}
	if err := syscall.Listen(fd, 1024); err != nil {
		syscall.Close(fd)
		os.Remove(path)
		return -1, fmt.Errorf("initproto: listen %s: %w", path, err)
	}
	return fd, nil
}

// spawnFiles are the parent's ends and the fds handed to the init.
type spawnFiles struct {
	devnull, log     *os.File
	cfgR, cfgW       *os.File
	syncR, syncW     *os.File
	statusR, statusW *os.File
	childOnly, all   []*os.File
}

func openSpawnFiles(logPath string, userns bool) (*spawnFiles, error) {
	f := &spawnFiles{}
	var err error
	if f.devnull, err = os.Open(os.DevNull); err != nil {
		return nil, fmt.Errorf("initproto: %w", err)
	}
	f.all = append(f.all, f.devnull)
	if f.log, err = os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640); err != nil {
		f.closeAll()
		return nil, fmt.Errorf("initproto: open log: %w", err)
	}
	f.all = append(f.all, f.log)
	for _, p := range []struct{ r, w **os.File }{{&f.cfgR, &f.cfgW}, {&f.syncR, &f.syncW}, {&f.statusR, &f.statusW}} {
		if userns && p.r == &f.syncR {
			*p.r, *p.w, err = syncPair()
		} else {
			*p.r, *p.w, err = os.Pipe()
		}
		if err != nil {
			f.closeAll()
			return nil, fmt.Errorf("initproto: pipe: %w", err)
		}
		f.all = append(f.all, *p.r, *p.w)
	}
	f.childOnly = []*os.File{f.devnull, f.log, f.cfgR, f.syncR, f.statusW}
	return f, nil
}

func (f *spawnFiles) closeChildOnly() {
	for _, x := range f.childOnly {
		x.Close()
	}
}

func (f *spawnFiles) closeAll() {
	for _, x := range f.all {
		x.Close()
	}
}

// Spawn starts a sandbox init and returns once it reported ready. The caller
// owns the returned process: it must reap it (wait4) after it dies. On error
// the init is killed and reaped and the socket removed; the error carries the
// init's own ERR text when it got that far.
func Spawn(ctx context.Context, cfg SpawnConfig) (*Init, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	lfd, err := listen(cfg.SocketPath)
	if err != nil {
		return nil, err
	}
	sys := &syscall.SysProcAttr{Cloneflags: cloneFlags, Setsid: true}
	if cfg.UserNS != nil {
		sys.Cloneflags |= syscall.CLONE_NEWUSER
	}
	if cfg.CgroupFD > 0 {
		sys.UseCgroupFD = true
	}
	// an init from the template namespace takes its layers over a socket
	tmplOK := cfg.Spawner.Template(cfg.InitPath) && spawnable(sys)
	files, err := openSpawnFiles(cfg.LogPath, cfg.UserNS != nil || tmplOK)
	if err != nil {
		syscall.Close(lfd)
		os.Remove(cfg.SocketPath)
		return nil, err
	}
	defer files.closeAll()

	seccompFD := ^uintptr(0) // -1: fd 7 stays closed
	if cfg.Seccomp != nil {
		seccompFD = cfg.Seccomp.Fd()
	}
	if cfg.UserNS != nil {
		sys.UidMappings = cfg.UserNS.sysProcMaps()
		sys.GidMappings = cfg.UserNS.sysProcMaps()
		sys.GidMappingsEnableSetgroups = true
		// become the namespace's root (host IDs HostID): the clone keeps
		// host uid 0, which is unmapped in there and would exec without
		// capabilities
		sys.Credential = &syscall.Credential{Uid: 0, Gid: 0}
	}
	if cfg.CgroupFD > 0 {
		sys.CgroupFD = cfg.CgroupFD
	}
	childFiles := []uintptr{
		files.devnull.Fd(), files.log.Fd(), files.log.Fd(),
		files.cfgR.Fd(), files.syncR.Fd(), files.statusW.Fd(),
		uintptr(lfd), seccompFD,
	}
	pid, err := 0, errSpawnerGone
	if cfg.Spawner != nil && spawnable(sys) {
		cgfd := -1
		if sys.UseCgroupFD {
			cgfd = sys.CgroupFD
		}
		pid, cfg.template, err = cfg.Spawner.spawn(cfg.InitPath, uint32(sys.Cloneflags), childFiles, cgfd, tmplOK)
	}
	if errors.Is(err, errSpawnerGone) {
		pid, err = syscall.ForkExec(cfg.InitPath, []string{"dsec-init"}, &syscall.ProcAttr{
			Env: []string{}, Files: childFiles, Sys: sys,
		})
	}
	runtime.KeepAlive(cfg.Seccomp)
	syscall.Close(lfd) // the init has its own copy now
	files.closeChildOnly()
	if err != nil {
		os.Remove(cfg.SocketPath)
		return nil, fmt.Errorf("initproto: start %s: %w", cfg.InitPath, err)
	}

	in, err := startInit(ctx, &cfg, files, pid)
	if err != nil {
		killAndReap(pid)
		os.Remove(cfg.SocketPath)
		return nil, err
	}
	return in, nil
}

// startInit runs the handshake: config, BeforeStart, sync byte, status line.
func startInit(ctx context.Context, cfg *SpawnConfig, files *spawnFiles, pid int) (*Init, error) {
	// A failed write only means the init died early; its status line (or
	// the lack of one) below says why.
	stop := watchCtx(ctx, files.cfgW.SetWriteDeadline)
	_, werr := files.cfgW.Write(cfg.configText())
	stop()
	files.cfgW.Close()
	if werr != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("initproto: write config: %w", ctx.Err())
	}
	if werr == nil && cfg.BeforeStart != nil {
		if err := cfg.BeforeStart(pid); err != nil {
			return nil, fmt.Errorf("initproto: before start of init %d: %w", pid, err)
		}
	}
	if werr == nil {
		if werr = sendSync(cfg, files.syncW, pid); werr != nil && cfg.UserNS != nil {
			files.syncW.Close()
			return nil, fmt.Errorf("initproto: init %d: %w", pid, werr)
		}
	}
	files.syncW.Close()

	line, err := readStatus(ctx, files.statusR)
	if err != nil {
		return nil, fmt.Errorf("initproto: init %d: %w", pid, err)
	}
	switch {
	case line == "OK":
	case strings.HasPrefix(line, "ERR "):
		return nil, fmt.Errorf("initproto: init setup failed: %s", strings.TrimPrefix(line, "ERR "))
	case line == "":
		return nil, fmt.Errorf("initproto: init %d exited during setup (write: %v)%s", pid, werr, logTail(cfg.LogPath))
	default:
		return nil, fmt.Errorf("initproto: init %d: unexpected status %q", pid, line)
	}
	st, err := ReadStartTime(pid)
	if err != nil {
		return nil, err
	}
	return &Init{PID: pid, StartTime: st}, nil
}

// readStatus reads the status line; "" means EOF without one.
func readStatus(ctx context.Context, r *os.File) (string, error) {
	stop := watchCtx(ctx, r.SetReadDeadline)
	defer stop()
	var buf []byte
	chunk := make([]byte, 512)
	for len(buf) < 4096 {
		n, err := r.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			return string(buf[:i]), nil
		}
		if err == io.EOF {
			return strings.TrimSpace(string(buf)), nil
		}
		if err != nil {
			return "", fmt.Errorf("read status: %w", ctxErr(ctx, err))
		}
	}
	return "", errors.New("status line too long")
}

// logTail returns the end of the init's log for error messages.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 512 {
		b = b[len(b)-512:]
	}
	return "; log: " + strings.TrimSpace(string(b))
}

// killAndReap SIGKILLs and reaps a child process the caller owns.
func killAndReap(pid int) {
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
		slog.Warn("initproto: kill init", "pid", pid, "err", err)
	}
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if err != syscall.EINTR {
			return
		}
	}
}
