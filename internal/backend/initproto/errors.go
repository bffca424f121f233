package initproto

import (
	"fmt"
	"strconv"
	"syscall"
)

// ExecError says the init could not start a process: chdir, the uid/gid
// switch or execve failed inside the sandbox.
type ExecError struct {
	Errno syscall.Errno
	Msg   string
}

func (e *ExecError) Error() string { return "initproto: exec failed: " + e.Msg }

// Unwrap lets errors.Is(err, syscall.ENOENT) match.
func (e *ExecError) Unwrap() error { return e.Errno }

// RemoteError is an ERROR reply to any other request.
type RemoteError struct {
	Op    string
	Errno syscall.Errno
	Msg   string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("initproto: %s: %s (errno %d)", e.Op, e.Msg, int(e.Errno))
}

// Unwrap lets errors.Is(err, syscall.ESRCH) match.
func (e *RemoteError) Unwrap() error { return e.Errno }

// errorReply converts an ERROR packet into its errno and message.
func errorReply(p *Packet) (syscall.Errno, string) {
	msg, _ := p.Get("msg")
	v, _ := p.Get("errno")
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		n = int(syscall.EIO)
	}
	return syscall.Errno(n), msg
}
