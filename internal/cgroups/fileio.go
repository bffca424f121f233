package cgroups

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// writeFile writes data to an existing control file: open O_WRONLY|O_TRUNC,
// one write, close. Errors are *os.PathError naming the file, so callers can
// still test the errno with errors.Is.
func writeFile(path, data string) error {
	fd, err := openRetry(path, unix.O_WRONLY|unix.O_TRUNC|unix.O_CLOEXEC)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	n, werr := writeRetry(fd, []byte(data))
	cerr := unix.Close(fd)
	switch {
	case werr != nil:
		return &os.PathError{Op: "write", Path: path, Err: werr}
	case n != len(data):
		return &os.PathError{Op: "write", Path: path, Err: fmt.Errorf("short write %d of %d bytes", n, len(data))}
	case cerr != nil:
		return &os.PathError{Op: "close", Path: path, Err: cerr}
	}
	return nil
}

func openRetry(path string, flags int) (int, error) {
	for {
		fd, err := unix.Open(path, flags, 0)
		if !errors.Is(err, unix.EINTR) {
			return fd, err
		}
	}
}

func writeRetry(fd int, b []byte) (int, error) {
	for {
		n, err := unix.Write(fd, b)
		if !errors.Is(err, unix.EINTR) {
			return n, err
		}
	}
}

// writeOptional is writeFile that treats a missing file as success, for
// controls that only some kernels or configurations provide.
func writeOptional(path, data string) error {
	if err := writeFile(path, data); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// readSmall reads a small control file with plain open, read and close: no
// fstat and no poller registration (cgroup files are pollable, so os.Open
// would add and remove each one from the netpoller), which matters for the
// counters read on every exec. Errors are *os.PathError naming the file.
func readSmall(path string) ([]byte, error) {
	fd, err := openRetry(path, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	b := make([]byte, 0, 512)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := unix.Read(fd, b[len(b):cap(b)])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return b, nil
		}
		b = b[:len(b)+n]
	}
}

// readString returns the trimmed content of a control file.
func readString(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return string(bytes.TrimSpace(b)), nil
}

// readInt parses a control file holding one integer.
func readInt(path string) (int64, error) {
	s, err := readString(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return v, nil
}

// readKey returns the value of key in a flat-keyed file of "key value" lines,
// such as memory.events, cpu.stat or memory.oom_control.
func readKey(path, key string) (uint64, error) {
	b, err := readSmall(path)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || k != key {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse %s %q: %w", path, key, err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("%s: no %q line", path, key)
}

// readPids parses a cgroup.procs file.
func readPids(path string) ([]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var pids []int
	for f := range strings.FieldsSeq(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", path, err)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}
