package e2b

import (
	"slices"
	"strings"
	"testing"
)

// A RUN's output becomes one log entry per line as the line ends, whatever
// the writes' boundaries; an unterminated last line at flush; an endless
// line in pieces.
func TestLogLines(t *testing.T) {
	var got []string
	l := &logLines{emit: func(s string) { got = append(got, s) }}
	for _, w := range []string{"fir", "st\nsec", "ond\r\n", "\nthird"} {
		_, _ = l.Write([]byte(w))
	}
	if want := []string{"first", "second", ""}; !slices.Equal(got, want) {
		t.Fatalf("before flush %q, want %q", got, want)
	}
	l.flush()
	if got[len(got)-1] != "third" {
		t.Fatalf("after flush %q", got)
	}
	got = nil
	_, _ = l.Write([]byte(strings.Repeat("x", maxLogLine+1)))
	if len(got) != 1 || len(got[0]) != maxLogLine {
		t.Fatalf("a long line: %d entries", len(got))
	}
}
