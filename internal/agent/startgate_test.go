package agent

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

// seqWriter logs what reaches it, after the events logged before.
type seqWriter struct {
	log  *[]string
	name string
}

func (w seqWriter) Write(p []byte) (int, error) {
	*w.log = append(*w.log, w.name+":"+string(p))
	return len(p), nil
}

func TestStartGateOrder(t *testing.T) {
	var log []string
	g, w := gate([2]io.Writer{seqWriter{&log, "out"}, seqWriter{&log, "err"}})
	_, _ = io.WriteString(w[0], "a")
	_, _ = io.WriteString(w[1], "b")
	_, _ = io.WriteString(w[0], "c")
	if len(log) != 0 {
		t.Fatalf("output %v went out before the start", log)
	}
	g.start(42, func(pid int) { log = append(log, "started") })
	_, _ = io.WriteString(w[1], "d")
	if got := strings.Join(log, " "); got != "started out:a err:b out:c err:d" {
		t.Errorf("got %q: want the start, then the output in the order written", got)
	}
}

// TestStartGateHoldsBounded: past maxHeld a write waits for the start instead
// of holding more, and loses nothing.
func TestStartGateHoldsBounded(t *testing.T) {
	var out bytes.Buffer
	g, w := gate([2]io.Writer{&out, io.Discard})
	big := bytes.Repeat([]byte("x"), maxHeld)
	_, _ = w[0].Write(big)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.WriteString(w[0], "tail")
	}()
	select {
	case <-done:
		t.Fatal("a write past the bound was held, not made to wait")
	case <-time.After(50 * time.Millisecond):
	}
	g.start(1, func(int) {})
	<-done
	if out.Len() != maxHeld+4 || !strings.HasSuffix(out.String(), "xtail") {
		t.Errorf("got %d bytes ending %q, want all %d in order", out.Len(), out.String()[max(0, out.Len()-8):], maxHeld+4)
	}
}

func TestStartGateAbandon(t *testing.T) {
	var out bytes.Buffer
	g, w := gate([2]io.Writer{&out, &out})
	if w[0] != w[1] {
		t.Error("one writer for both streams became two (the driver would use two pipes)")
	}
	_, _ = io.WriteString(w[0], "never started")
	g.abandon()
	if _, err := io.WriteString(w[0], "more"); err == nil {
		t.Error("a write after an abandoned start succeeded")
	}
	if out.Len() != 0 {
		t.Errorf("output %q of an exec that did not start went out", out.String())
	}
}

// BenchmarkStartGateWrite is what the gate adds to each write once the start
// went out.
func BenchmarkStartGateWrite(b *testing.B) {
	g, w := gate([2]io.Writer{io.Discard, io.Discard})
	g.start(1, func(int) {})
	p := make([]byte, 4096)
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		_, _ = w[0].Write(p)
	}
}
