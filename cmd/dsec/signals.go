package main

import (
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// signalNumber maps a result's signal ("SIGKILL", or "signal 34" for one without
// a name) to its number; anything else maps to 0.
func signalNumber(name string) int {
	if n, err := strconv.Atoi(strings.TrimPrefix(name, "signal ")); err == nil && n > 0 {
		return n
	}
	return int(unix.SignalNum(strings.ToUpper(name)))
}
