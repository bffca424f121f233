// Package racecheck is how the suites that run a dsec binary as a separate
// process (test/e2e, the cluster suite) read the race detector: the process runs
// with GORACE=halt_on_error=1, so the first data race ends it, and the suite
// fails when its output holds a race report or it exited other than cleanly or by
// the signal the test itself sent.
package racecheck

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

// Marker starts every report of the race detector.
const Marker = "WARNING: DATA RACE"

// Env returns environ with GORACE set to end the process at its first race report
// (halt_on_error=1); every other GORACE option in environ is kept.
func Env(environ []string) []string {
	opts := []string{}
	out := make([]string, 0, len(environ)+1)
	for _, kv := range environ {
		v, ok := strings.CutPrefix(kv, "GORACE=")
		if !ok {
			out = append(out, kv)
			continue
		}
		opts = opts[:0]
		for _, o := range strings.Fields(v) {
			if !strings.HasPrefix(o, "halt_on_error=") {
				opts = append(opts, o)
			}
		}
	}
	return append(out, "GORACE="+strings.Join(append(opts, "halt_on_error=1"), " "))
}

// Report returns the first race report in log, up to 16 KiB of it, or "" when log
// has none.
func Report(log string) string {
	i := strings.Index(log, Marker)
	if i < 0 {
		return ""
	}
	r := log[i:]
	if len(r) > 16<<10 {
		r = r[:16<<10] + "\n..."
	}
	return r
}

// Check returns an error when log (the process's stdout and stderr) holds a race
// report, or when the process that ended with state exited non-zero or was
// killed by a signal other than sent (0: the test sent none). A process that
// exited 0, or that the sent signal ended, passes.
func Check(name, log string, state *os.ProcessState, sent syscall.Signal) error {
	if r := Report(log); r != "" {
		return fmt.Errorf("%s: the race detector reported a data race:\n%s", name, r)
	}
	if state == nil {
		return fmt.Errorf("%s: never waited for", name)
	}
	ws, _ := state.Sys().(syscall.WaitStatus)
	switch {
	case state.Exited() && state.ExitCode() == 0:
		return nil
	case ws.Signaled() && sent != 0 && ws.Signal() == sent:
		return nil
	case ws.Signaled():
		return fmt.Errorf("%s: killed by %v, a signal the test did not send", name, ws.Signal())
	default:
		return fmt.Errorf("%s: exited with status %d", name, state.ExitCode())
	}
}
