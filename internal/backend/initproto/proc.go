package initproto

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// statFields returns the fields of /proc/PID/stat after the command name:
// index 0 is field 3 (state).
func statFields(pid int) ([][]byte, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("initproto: malformed /proc/%d/stat", pid)
	}
	return bytes.Fields(b[i+1:]), nil
}

// ReadStartTime returns the start time of pid in clock ticks since boot
// (field 22 of /proc/PID/stat). Together with the pid it identifies a process
// across pid reuse.
func ReadStartTime(pid int) (uint64, error) {
	f, err := statFields(pid)
	if err != nil {
		return 0, fmt.Errorf("initproto: start time of %d: %w", pid, err)
	}
	if len(f) < 20 {
		return 0, fmt.Errorf("initproto: short /proc/%d/stat", pid)
	}
	v, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("initproto: start time of %d: %w", pid, err)
	}
	return v, nil
}

// Alive reports whether pid still is the process that started at startTime
// and has not exited (a zombie counts as dead).
func Alive(pid int, startTime uint64) bool {
	f, err := statFields(pid)
	if err != nil || len(f) < 20 {
		return false
	}
	if st := string(f[0]); st == "Z" || st == "X" || st == "x" {
		return false
	}
	v, err := strconv.ParseUint(string(f[19]), 10, 64)
	return err == nil && v == startTime
}
