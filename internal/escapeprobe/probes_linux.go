package escapeprobe

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// NoopArg makes the probe binary exit 0 at once (the child of unshare-userns).
const NoopArg = "-noop"

func mknodRead(dir string, e Env) (string, error) {
	if e.HostDisk[0] == 0 {
		return "", errors.New("no host disk given")
	}
	p := filepath.Join(dir, fmt.Sprintf(".probe-disk-%d", os.Getpid()))
	if err := unix.Mknod(p, unix.S_IFBLK|0o600, int(unix.Mkdev(e.HostDisk[0], e.HostDisk[1]))); err != nil {
		return "mknod " + p, err
	}
	defer os.Remove(p)
	f, err := os.Open(p)
	if err != nil {
		return "mknod worked, open " + p, err
	}
	defer f.Close()
	buf := make([]byte, 512)
	n, err := f.Read(buf)
	if err != nil || n == 0 {
		return "mknod and open worked, read", fmt.Errorf("read %d bytes: %v", n, err)
	}
	return fmt.Sprintf("read %d bytes of the host disk %d:%d through %s", n, e.HostDisk[0], e.HostDisk[1], p), nil
}

func readMasked(e Env) (string, error) {
	f, err := os.Open(e.path)
	if err != nil {
		return "open " + e.path, err
	}
	defer f.Close()
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return "fstatfs", err
	}
	if st.Type != unix.PROC_SUPER_MAGIC && st.Type != unix.SYSFS_MAGIC {
		return e.path, fmt.Errorf("masked (file system %#x)", st.Type)
	}
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		names, err := f.Readdirnames(1)
		if len(names) == 0 {
			return "list " + e.path, fmt.Errorf("empty: %v", err)
		}
		return "listed " + e.path + ": " + names[0], nil
	}
	buf := make([]byte, 8)
	n, err := f.Read(buf)
	if n == 0 {
		return "read " + e.path, fmt.Errorf("nothing read: %v", err)
	}
	return fmt.Sprintf("read %d bytes of %s", n, e.path), nil
}

func writeProcSys(Env) (string, error) {
	const p = "/proc/sys/kernel/hostname"
	cur, err := os.ReadFile(p)
	if err != nil {
		return "read " + p, err
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return "open " + p, err
	}
	defer f.Close()
	if _, err := f.Write(bytes.TrimSpace(cur)); err != nil {
		return "write " + p, err
	}
	return "wrote " + p, nil
}

// hostRootUID escapes when uid 0 here is uid 0 of the host's user namespace.
func hostRootUID(Env) (string, error) {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return "read uid_map", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "0" {
			if f[1] == "0" {
				return "uid_map: " + strings.Join(f, " "), nil
			}
			return "uid_map: " + strings.Join(f, " "), fmt.Errorf("root maps to host uid %s", f[1])
		}
	}
	return "uid_map: " + strings.TrimSpace(string(b)), errors.New("uid 0 is not mapped")
}

// writeHostSysctl writes a sysctl no namespace holds (its own value back):
// only host root may.
func writeHostSysctl(Env) (string, error) {
	const p = "/proc/sys/vm/overcommit_ratio"
	cur, err := os.ReadFile(p)
	if err != nil {
		return "read " + p, err
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return "open " + p, err
	}
	defer f.Close()
	if _, err := f.Write(bytes.TrimSpace(cur)); err != nil {
		return "write " + p, err
	}
	return "wrote " + p, nil
}

func rawPacket(Env) (string, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return "socket(AF_PACKET, SOCK_RAW)", err
	}
	unix.Close(fd)
	return "opened an AF_PACKET raw socket", nil
}

func rawInet(Env) (string, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMP)
	if err != nil {
		return "socket(AF_INET, SOCK_RAW)", err
	}
	unix.Close(fd)
	return "opened an AF_INET raw socket", nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Status reads fields of /proc/self/status.
func Status() (map[string]string, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m, nil
}

func capSet(e Env) (string, error) {
	st, err := Status()
	if err != nil {
		return "", err
	}
	want := map[string]uint64{"CapInh": 0, "CapPrm": e.WantCaps, "CapEff": e.WantCaps, "CapBnd": e.WantCaps, "CapAmb": 0}
	var diffs, all []string
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		got, err := strconv.ParseUint(st[k], 16, 64)
		if err != nil {
			return "", fmt.Errorf("%s: %q", k, st[k])
		}
		all = append(all, fmt.Sprintf("%s=%016x", k, got))
		if got != want[k] {
			diffs = append(diffs, fmt.Sprintf("%s=%016x (want %016x)", k, got, want[k]))
		}
	}
	if len(diffs) == 0 {
		return strings.Join(all, " "), errors.New("exactly the expected set")
	}
	return strings.Join(diffs, " "), nil
}

func seccompOff(Env) (string, error) {
	st, err := Status()
	if err != nil {
		return "", err
	}
	d := fmt.Sprintf("Seccomp=%s NoNewPrivs=%s", st["Seccomp"], st["NoNewPrivs"])
	if st["Seccomp"] == "2" && st["NoNewPrivs"] == "1" {
		return d, errors.New("filter and no_new_privs set")
	}
	return d, nil
}

func unlistedSyscall(Env) (string, error) {
	if e := rawErrno(unix.SYS_GET_MEMPOLICY, 0, 0); e != 0 {
		return "get_mempolicy", e
	}
	return "get_mempolicy worked", nil
}

// rawErrno makes system call nr and returns its errno (0: it worked).
func rawErrno(nr, a0, a1 uintptr) syscall.Errno {
	_, _, e := unix.RawSyscall(nr, a0, a1, 0)
	return e
}

// SyscallErrnos makes system calls whose outcome shows the seccomp policy
// and returns each one's errno name ("ok" when it worked): a call the allow
// list does not name, socket with the address families Docker refuses, a
// number no kernel assigns, clone3 (ENOSYS under the filter, so libc falls
// back to clone) and calls that must keep working.
func SyscallErrnos() map[string]string {
	name := func(e syscall.Errno) string {
		if e == 0 {
			return "ok"
		}
		return unix.ErrnoName(e)
	}
	sock := func(family int) string {
		fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
			return "ok"
		}
		var e syscall.Errno
		if errors.As(err, &e) {
			return name(e)
		}
		return err.Error()
	}
	return map[string]string{
		"get_mempolicy":     name(rawErrno(unix.SYS_GET_MEMPOLICY, 0, 0)),
		"socket_af_vsock":   sock(unix.AF_VSOCK),
		"socket_af_alg":     sock(unix.AF_ALG),
		"socket_af_unix":    sock(unix.AF_UNIX),
		"socket_af_inet":    sock(unix.AF_INET),
		"syscall_1000":      name(rawErrno(1000, 0, 0)),
		"clone3":            name(rawErrno(unix.SYS_CLONE3, 0, 0)),
		"getpid":            name(rawErrno(unix.SYS_GETPID, 0, 0)),
		"personality_query": name(rawErrno(unix.SYS_PERSONALITY, 0xffffffff, 0)),
		"personality_rie":   name(rawErrno(unix.SYS_PERSONALITY, 0x0400000, 0)),
		"unshare_uts":       name(rawErrno(unix.SYS_UNSHARE, unix.CLONE_NEWUTS, 0)),
		"sethostname":       name(rawErrno(unix.SYS_SETHOSTNAME, 0, 0)),
	}
}

func setnsProbe(Env) (string, error) {
	f, err := os.Open("/proc/self/ns/uts")
	if err != nil {
		return "open /proc/self/ns/uts", err
	}
	defer f.Close()
	if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWUTS); err != nil {
		return "setns(uts)", err
	}
	return "setns into a UTS namespace worked", nil
}

func mountProbe(Env) (string, error) {
	dir, err := os.MkdirTemp("", "probe-mnt-")
	if err != nil {
		return "", err
	}
	defer os.Remove(dir)
	if err := unix.Mount("probe", dir, "tmpfs", 0, "size=64k"); err != nil {
		return "mount tmpfs", err
	}
	_ = unix.Unmount(dir, unix.MNT_DETACH)
	return "mounted a tmpfs on " + dir, nil
}

func unshareUser(Env) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(self, NoopArg)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER}
	if err := cmd.Run(); err != nil {
		return "clone(CLONE_NEWUSER)", err
	}
	return "started a process in a new user namespace", nil
}

func stealInitFD(Env) (string, error) {
	pidfd, err := unix.PidfdOpen(1, 0)
	if err != nil {
		return "pidfd_open(1)", err
	}
	defer unix.Close(pidfd)
	var got []string
	var lastErr error
	for fd := 0; fd < 64; fd++ {
		nfd, err := unix.PidfdGetfd(pidfd, fd, 0)
		if err != nil {
			if !errors.Is(err, unix.EBADF) {
				lastErr = err
			}
			continue
		}
		desc := fmt.Sprintf("fd %d", fd)
		if typ, err := unix.GetsockoptInt(nfd, unix.SOL_SOCKET, unix.SO_TYPE); err == nil {
			acc, _ := unix.GetsockoptInt(nfd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
			desc += fmt.Sprintf(" (socket type %d, listening %d)", typ, acc)
		}
		got = append(got, desc)
		unix.Close(nfd)
	}
	if len(got) == 0 {
		if lastErr == nil {
			lastErr = errors.New("no fd obtained")
		}
		return "pidfd_getfd(init)", lastErr
	}
	return "took init's " + strings.Join(got, ", "), nil
}

// ownCgroup returns the controller option for mount and this process's
// path in that hierarchy ("pids" on v1, "" for the unified one).
func ownCgroup() (ctrl, path string, err error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", "", err
	}
	unified := ""
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[1] == "pids" {
			return "pids", f[2], nil
		}
		if f[1] == "" {
			unified = f[2]
		}
	}
	return "", unified, nil
}

func cgroupEscape(Env) (string, error) {
	ctrl, before, err := ownCgroup()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "probe-cg-")
	if err != nil {
		return "", err
	}
	defer os.Remove(dir)
	if ctrl != "" {
		err = unix.Mount("probe", dir, "cgroup", 0, ctrl)
	} else {
		err = unix.Mount("probe", dir, "cgroup2", 0, "")
	}
	if err != nil {
		return "mount cgroup " + ctrl, err
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		return "move to the hierarchy's root", err
	}
	_, after, err := ownCgroup()
	if err != nil {
		return "", err
	}
	if after == before {
		return "cgroup " + after, errors.New("still in its own cgroup (the mount shows only the sandbox's)")
	}
	return fmt.Sprintf("moved from %s to %s", before, after), nil
}
