package reclaim

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Range is one virtual address range of a process.
type Range struct{ Start, End uintptr }

// Len is the range's size in bytes.
func (r Range) Len() uintptr { return r.End - r.Start }

// AnonRanges lists the private anonymous mappings of process pid (heap, stacks,
// anonymous mmaps) from /proc/PID/maps: the memory that only swap can hold.
func AnonRanges(pid int) ([]Range, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMaps(bufio.NewScanner(f))
}

// parseMaps reads /proc/PID/maps lines and keeps private mappings without a
// backing file ([heap], [stack], anonymous); [vvar], [vdso] and [vsyscall]
// are not memory the process owns.
func parseMaps(sc *bufio.Scanner) ([]Range, error) {
	var rs []Range
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		addr, perms := fields[0], fields[1]
		if len(perms) < 4 || perms[3] != 'p' {
			continue
		}
		path := ""
		if len(fields) >= 6 {
			path = fields[5]
		}
		if path != "" && path != "[heap]" && !strings.HasPrefix(path, "[stack") {
			continue
		}
		lo, hi, ok := strings.Cut(addr, "-")
		if !ok {
			continue
		}
		s, err1 := strconv.ParseUint(lo, 16, 64)
		e, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || e <= s {
			continue
		}
		rs = append(rs, Range{uintptr(s), uintptr(e)})
	}
	return rs, sc.Err()
}

// remoteIovec is a struct iovec naming memory in another process: plain
// integers, never a Go pointer.
type remoteIovec struct{ base, len uint64 }

// maxIov is the kernel's UIO_MAXIOV: process_madvise takes at most this many
// ranges per call.
const maxIov = 1024

// Advise applies advice (unix.MADV_PAGEOUT, MADV_COLD, MADV_WILLNEED) to ranges
// of process pid with process_madvise(2) and returns the bytes the kernel
// accepted. A process that exited meanwhile is not an error.
func Advise(ctx context.Context, pid int, ranges []Range, advice int) (int64, error) {
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return 0, nil
		}
		return 0, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(pfd)
	var done int64
	for len(ranges) > 0 {
		if err := ctx.Err(); err != nil {
			return done, err
		}
		n := min(len(ranges), maxIov)
		iov := make([]remoteIovec, n)
		for i, r := range ranges[:n] {
			iov[i] = remoteIovec{uint64(r.Start), uint64(r.Len())}
		}
		got, _, e := unix.Syscall6(unix.SYS_PROCESS_MADVISE, uintptr(pfd), uintptr(unsafe.Pointer(&iov[0])), uintptr(n), uintptr(advice), 0, 0)
		switch {
		case e == unix.ESRCH:
			return done, nil
		case e == unix.EINTR || e == unix.EAGAIN:
			continue
		case e == unix.ENOMEM:
			// A range was unmapped meanwhile: advise range by range.
			for _, r := range ranges[:n] {
				one := remoteIovec{uint64(r.Start), uint64(r.Len())}
				g, _, e := unix.Syscall6(unix.SYS_PROCESS_MADVISE, uintptr(pfd), uintptr(unsafe.Pointer(&one)), 1, uintptr(advice), 0, 0)
				if e == 0 {
					done += int64(g)
				}
			}
		case e != 0:
			return done, fmt.Errorf("process_madvise(%d, advice %d): %w", pid, advice, e)
		default:
			done += int64(got)
		}
		ranges = ranges[n:]
	}
	return done, nil
}

// AdviseAll applies advice to the anonymous memory of every process in pids and
// returns the bytes advised.
func AdviseAll(ctx context.Context, pids []int, advice int) (int64, error) {
	var total int64
	for _, pid := range pids {
		rs, err := AnonRanges(pid)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
				continue
			}
			return total, err
		}
		n, err := Advise(ctx, pid, rs, advice)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}
