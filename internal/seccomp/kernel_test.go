package seccomp

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// helperEnv makes the re-executed test binary act as TestHelperProcess.
const helperEnv = "DSEC_SECCOMP_HELPER"

// TestHelperProcess runs only in the child started by TestKernelEnforces: it
// installs the default filter and reports each probe's errno as JSON.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("helper process for TestKernelEnforces")
	}
	prog, err := Default().Compile()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := Install(prog); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	res := map[string]string{}
	errName := func(e syscall.Errno) string {
		if e == 0 {
			return "ok"
		}
		return unix.ErrnoName(e)
	}
	dir, err := os.MkdirTemp("", "dsec-seccomp-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	err = unix.Mount("none", dir, "tmpfs", 0, "")
	if err == nil {
		_ = unix.Unmount(dir, 0)
	}
	res["mount"] = errName(errnoOf(err))
	res["unshare"] = errName(errnoOf(unix.Unshare(unix.CLONE_NEWNS)))
	_, _, e := unix.RawSyscall(unix.SYS_CLONE3, 0, 0, 0)
	res["clone3"] = errName(e)
	_, _, e = unix.RawSyscall(x32Bit|unix.SYS_GETPID, 0, 0, 0)
	res["x32_getpid"] = errName(e)
	pid, _, e := unix.RawSyscall(unix.SYS_GETPID, 0, 0, 0)
	if e == 0 && int(pid) != os.Getpid() {
		e = unix.EINVAL
	}
	res["getpid"] = errName(e)
	_, _, e = unix.RawSyscall(unix.SYS_PERSONALITY, 0xffffffff, 0, 0)
	res["personality_query"] = errName(e)
	_, _, e = unix.RawSyscall(unix.SYS_PERSONALITY, 0x400000, 0, 0)
	res["personality_rie"] = errName(e)
	_, _, e = unix.RawSyscall(unix.SYS_GET_MEMPOLICY, 0, 0, 0)
	res["get_mempolicy"] = errName(e) // not on the allow list
	_, _, e = unix.RawSyscall(1000, 0, 0, 0)
	res["nr_1000"] = errName(e) // no such system call: refused, not ENOSYS
	fd, _, e := unix.RawSyscall(unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM, 0)
	if e == 0 {
		unix.Close(int(fd))
	}
	res["socket_vsock"] = errName(e)
	fd, _, e = unix.RawSyscall(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if e == 0 {
		unix.Close(int(fd))
	}
	res["socket_unix"] = errName(e)
	// Go forks with clone(2) (no namespace flags) unless asked otherwise.
	res["exec_plain"] = errName(errnoOf(exec.Command("/bin/true").Run()))
	userns := exec.Command("/bin/true")
	userns.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER}
	res["exec_newuser"] = errName(errnoOf(userns.Run()))
	// TSYNC: every thread of the process must carry the filter and
	// no_new_privs, not only the one that called Install.
	res["threads"] = threadsFiltered()
	os.Remove(dir)
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		os.Exit(2)
	}
	os.Exit(0)
}

// threadsFiltered reports "all N" when every task in /proc/self/task is in
// seccomp filter mode with no_new_privs, else the first offender.
func threadsFiltered() string {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err.Error()
	}
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/status")
		if err != nil {
			return err.Error()
		}
		s := string(b)
		if !strings.Contains(s, "\nSeccomp:\t2\n") || !strings.Contains(s, "\nNoNewPrivs:\t1\n") {
			return "task " + task.Name() + " unfiltered"
		}
	}
	return fmt.Sprintf("all %d", len(tasks))
}

func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return unix.EIO
}

func TestKernelEnforces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, so that the unfiltered mount would succeed")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	var res map[string]string
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("helper output %q: %v", out, err)
	}
	want := map[string]string{
		"mount":             "EPERM",
		"unshare":           "EPERM",
		"clone3":            "ENOSYS",
		"x32_getpid":        "EPERM",
		"getpid":            "ok",
		"personality_query": "ok",
		"personality_rie":   "EPERM",
		"exec_plain":        "ok",
		"exec_newuser":      "EPERM",
		"get_mempolicy":     "EPERM",
		"nr_1000":           "EPERM",
		"socket_vsock":      "EPERM",
		"socket_unix":       "ok",
	}
	if !strings.HasPrefix(res["threads"], "all ") || res["threads"] == "all 1" {
		t.Errorf("threads = %q, want all of several threads filtered", res["threads"])
	}
	for k, v := range want {
		if res[k] != v {
			t.Errorf("%s = %q, want %q", k, res[k], v)
		}
	}
}
