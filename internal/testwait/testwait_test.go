package testwait

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// TestForWaitsForTheCondition: For returns once a condition set by another
// goroutine holds, long before its deadline.
func TestForWaitsForTheCondition(t *testing.T) {
	var done atomic.Bool
	go func() {
		time.Sleep(30 * time.Millisecond) // the thing waited for happens later
		done.Store(true)
	}()
	start := time.Now()
	For(t, 10*time.Second, "the flag", done.Load)
	if !done.Load() {
		t.Fatal("For returned before the condition held")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("For took %v for a condition that held after 30 ms", took)
	}
}

// TestForFailsAtTheDeadline: a condition that never holds fails the test
// after about the deadline, naming what was waited for.
func TestForFailsAtTheDeadline(t *testing.T) {
	rec := &recorder{TB: t}
	start := time.Now()
	func() {
		defer func() { _ = recover() }() // Fatalf below ends the wait by panicking
		For(rec, 50*time.Millisecond, "never", func() bool { return false })
	}()
	if took := time.Since(start); took < 50*time.Millisecond || took > 5*time.Second {
		t.Errorf("For gave up after %v, want about 50 ms", took)
	}
	if rec.msg != "never: not within 50ms" {
		t.Errorf("failure %q", rec.msg)
	}
}

// TestUntil: Until reports whether the condition held within the deadline,
// checking it once more at the deadline, and fails nothing itself.
func TestUntil(t *testing.T) {
	var n atomic.Int32
	if !Until(10*time.Second, func() bool { return n.Add(1) == 3 }) {
		t.Fatal("a condition holding at the third check: false")
	}
	start := time.Now()
	if Until(50*time.Millisecond, func() bool { return false }) {
		t.Fatal("a condition that never holds: true")
	}
	if took := time.Since(start); took < 50*time.Millisecond || took > 5*time.Second {
		t.Errorf("Until gave up after %v, want about 50 ms", took)
	}
}

// recorder records a Fatalf instead of ending the test.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	panic("fatal")
}
