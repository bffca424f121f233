package e2e

import (
	"bytes"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/testwait"
)

// screen collects a terminal's output and waits for patterns in it, as a user
// watching the terminal would.
type screen struct {
	mu  sync.Mutex
	b   []byte
	pos int // what expect already consumed
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	return len(p), nil
}

// all is everything the terminal showed so far.
func (s *screen) all() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.b)
}

// expect waits up to 30 s for pattern in the output after the last match and
// returns the match's groups; the output up to the match is consumed.
func (s *screen) expect(t *testing.T, pattern string) []string {
	t.Helper()
	rx := regexp.MustCompile(pattern)
	var groups []string
	var tail string
	matched := testwait.Until(30*time.Second, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		rest := s.b[s.pos:]
		m := rx.FindSubmatchIndex(rest)
		if m == nil {
			tail = string(bytes.Clone(rest))
			return false
		}
		groups = make([]string, 0, len(m)/2)
		for i := 0; i < len(m); i += 2 {
			if m[i] >= 0 {
				groups = append(groups, string(rest[m[i]:m[i+1]]))
			} else {
				groups = append(groups, "")
			}
		}
		s.pos += m[1]
		return true
	})
	if !matched {
		t.Fatalf("terminal never showed %q; after the last match it shows %q", pattern, tail)
	}
	return groups
}
