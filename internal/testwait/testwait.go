// Package testwait is how a test waits for something to happen: it polls a
// condition until it holds or a deadline passes, and fails the test naming
// what never happened. Tests use it instead of sleeping a fixed time and
// hoping the thing happened meanwhile (too short on a loaded machine, too long
// everywhere else). It has no dependencies: any package's tests may use it.
package testwait

import (
	"testing"
	"time"
)

// maxPoll is the longest pause between two checks of a condition.
const maxPoll = 20 * time.Millisecond

// For returns once cond holds, checking it at once and then at growing
// intervals (1 ms up to 20 ms); when it still does not hold after within, it
// fails the test with "what: not within ...". Call it from the test's
// goroutine.
func For(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Until(within, cond) {
		t.Fatalf("%s: not within %v", what, within)
	}
}

// Until checks cond as For does and reports whether it held within the
// deadline, for a test that reports the failure itself (with the state it
// saw then, or as a non-fatal error) or that waits best-effort.
func Until(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for pause := time.Millisecond; !cond(); pause = min(2*pause, maxPoll) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause) // the poll interval: cond is checked again after it
	}
	return true
}
