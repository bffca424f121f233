package seccomp

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// Action is a seccomp filter return value (SECCOMP_RET_*).
type Action uint32

// Actions without data.
const (
	Allow       Action = unix.SECCOMP_RET_ALLOW
	KillProcess Action = unix.SECCOMP_RET_KILL_PROCESS
)

// Errno fails the syscall with errno e instead of running it.
func Errno(e syscall.Errno) Action {
	return Action(unix.SECCOMP_RET_ERRNO | uint32(e)&unix.SECCOMP_RET_DATA)
}

// valid reports whether a is a return value the kernel understands.
func (a Action) valid() bool {
	switch uint32(a) & unix.SECCOMP_RET_ACTION_FULL {
	case unix.SECCOMP_RET_KILL_PROCESS, unix.SECCOMP_RET_KILL_THREAD, unix.SECCOMP_RET_TRAP,
		unix.SECCOMP_RET_ERRNO, unix.SECCOMP_RET_USER_NOTIF, unix.SECCOMP_RET_TRACE,
		unix.SECCOMP_RET_LOG, unix.SECCOMP_RET_ALLOW:
		return true
	}
	return false
}

func (a Action) String() string {
	switch {
	case a == Allow:
		return "allow"
	case a == KillProcess:
		return "kill_process"
	case uint32(a)&unix.SECCOMP_RET_ACTION_FULL == unix.SECCOMP_RET_ERRNO:
		return fmt.Sprintf("errno(%s)", unix.ErrnoName(syscall.Errno(uint32(a)&unix.SECCOMP_RET_DATA)))
	}
	return fmt.Sprintf("action(%#x)", uint32(a))
}
