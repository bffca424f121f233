package seccomp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Encode returns prog as the raw struct sock_filter array (8 little-endian
// bytes each: u16 code, u8 jt, u8 jf, u32 k), the buffer a C init points a
// struct sock_fprog at for prctl(PR_SET_SECCOMP) or seccomp(2).
func Encode(prog []unix.SockFilter) []byte {
	b := make([]byte, 0, 8*len(prog))
	for _, f := range prog {
		b = binary.LittleEndian.AppendUint16(b, f.Code)
		b = append(b, f.Jt, f.Jf)
		b = binary.LittleEndian.AppendUint32(b, f.K)
	}
	return b
}

// Install sets no_new_privs and loads prog as a seccomp filter on every
// thread of the calling process (SECCOMP_FILTER_FLAG_TSYNC), so Go's
// runtime threads are covered too. It cannot be undone.
func Install(prog []unix.SockFilter) error {
	if len(prog) == 0 || len(prog) > unix.BPF_MAXINSNS {
		return fmt.Errorf("seccomp: install: program length %d not in 1..%d", len(prog), unix.BPF_MAXINSNS)
	}
	// no_new_privs is per thread; it must be set on the thread that calls
	// seccomp(2), which TSYNC then propagates it from.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: install: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return fmt.Errorf("seccomp: install: seccomp(SET_MODE_FILTER, TSYNC): %w", errno)
	}
	if r != 0 {
		return fmt.Errorf("seccomp: install: thread %d could not be synchronized", r)
	}
	return nil
}

// MemFD returns a close-on-exec memfd holding Encode(prog), sealed against
// any change (F_SEAL_WRITE|SHRINK|GROW|SEAL), positioned at offset 0. Hand
// it to children (e.g. exec.Cmd.ExtraFiles); since they share the file
// offset, readers should use pread at offset 0 (or mmap) rather than read.
func MemFD(prog []unix.SockFilter) (*os.File, error) {
	b := Encode(prog)
	fd, err := unix.MemfdCreate("dsec-seccomp", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("seccomp: memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "dsec-seccomp")
	fail := func(op string, err error) (*os.File, error) {
		f.Close()
		return nil, fmt.Errorf("seccomp: memfd %s: %w", op, err)
	}
	if n, err := f.Write(b); err != nil || n != len(b) {
		return fail("write", errors.Join(err, fmt.Errorf("wrote %d of %d bytes", n, len(b))))
	}
	seals := unix.F_SEAL_WRITE | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		return fail("seal", err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		return fail("seek", err)
	}
	return f, nil
}
