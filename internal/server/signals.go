package server

import (
	"strconv"
	"strings"
	"syscall"

	"github.com/dsec-dev/dsec/internal/errdefs"
)

// maxSignal is the highest Linux signal number (SIGRTMAX).
const maxSignal = 64

// parseSignal accepts "SIGTERM", "TERM", "sigterm" or "15"; empty means def.
func parseSignal(name string, def int) (int, error) {
	if name == "" {
		return def, nil
	}
	if n, err := strconv.Atoi(name); err == nil {
		if n < 1 || n > maxSignal {
			return 0, errdefs.Invalid("signal number %d out of range 1..%d", n, maxSignal)
		}
		return n, nil
	}
	if sig := signalByName(strings.TrimPrefix(strings.ToUpper(name), "SIG")); sig != 0 {
		return int(sig), nil
	}
	return 0, errdefs.Invalid("unknown signal %q", name)
}

// signalByName maps a signal name without "SIG" to its number, 0 if unknown.
func signalByName(name string) syscall.Signal {
	switch name {
	case "HUP":
		return syscall.SIGHUP
	case "INT":
		return syscall.SIGINT
	case "QUIT":
		return syscall.SIGQUIT
	case "ILL":
		return syscall.SIGILL
	case "TRAP":
		return syscall.SIGTRAP
	case "ABRT", "IOT":
		return syscall.SIGABRT
	case "BUS":
		return syscall.SIGBUS
	case "FPE":
		return syscall.SIGFPE
	case "KILL":
		return syscall.SIGKILL
	case "USR1":
		return syscall.SIGUSR1
	case "SEGV":
		return syscall.SIGSEGV
	case "USR2":
		return syscall.SIGUSR2
	case "PIPE":
		return syscall.SIGPIPE
	case "ALRM":
		return syscall.SIGALRM
	case "TERM":
		return syscall.SIGTERM
	case "CHLD":
		return syscall.SIGCHLD
	case "CONT":
		return syscall.SIGCONT
	case "STOP":
		return syscall.SIGSTOP
	case "TSTP":
		return syscall.SIGTSTP
	case "TTIN":
		return syscall.SIGTTIN
	case "TTOU":
		return syscall.SIGTTOU
	case "URG":
		return syscall.SIGURG
	case "XCPU":
		return syscall.SIGXCPU
	case "XFSZ":
		return syscall.SIGXFSZ
	case "VTALRM":
		return syscall.SIGVTALRM
	case "PROF":
		return syscall.SIGPROF
	case "WINCH":
		return syscall.SIGWINCH
	case "IO", "POLL":
		return syscall.SIGIO
	case "SYS":
		return syscall.SIGSYS
	}
	return 0
}
