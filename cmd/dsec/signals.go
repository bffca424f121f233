package main

import (
	"strings"

	"golang.org/x/sys/unix"
)

// signalNumber maps "SIGKILL" to 9; unknown names map to 0.
func signalNumber(name string) int {
	s := unix.SignalNum(strings.ToUpper(name))
	return int(s)
}
