package procio

import (
	"fmt"
	"io"
)

// CapWriter passes the first max bytes to w, then writes the truncation marker
// the sandbox init writes into a capped log, and drops the rest (still
// reporting success, so the producer never blocks or fails on it). already is
// how much the destination holds from before (a log appended to after an agent
// restart).
func CapWriter(w io.Writer, max, already int64) io.Writer {
	return &capWriter{w: w, max: max, n: already}
}

type capWriter struct {
	w         io.Writer
	max, n    int64
	truncated bool
}

func (c *capWriter) Write(p []byte) (int, error) {
	if c.truncated {
		return len(p), nil
	}
	room := c.max - c.n
	if int64(len(p)) <= room {
		n, err := c.w.Write(p)
		c.n += int64(n)
		return n, err
	}
	if room > 0 {
		if _, err := c.w.Write(p[:room]); err != nil {
			return 0, err
		}
	}
	c.n = c.max
	c.truncated = true
	_, err := fmt.Fprintf(c.w, "\n[dsec: output truncated after %d bytes]\n", c.max)
	return len(p), err
}
