package main

import "testing"

func TestSignalNumber(t *testing.T) {
	for in, want := range map[string]int{"SIGKILL": 9, "SIGTERM": 15, "sigint": 2, "signal 34": 34, "": 0, "KILL": 0, "SIGNOPE": 0, "signal x": 0} {
		if got := signalNumber(in); got != want {
			t.Errorf("signalNumber(%q) = %d, want %d", in, got, want)
		}
	}
}
