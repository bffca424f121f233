package fncall

import (
	"bytes"
	"fmt"
	"math"
	"strconv"

	"github.com/dsec-dev/dsec/pkg/api"
)

// DefaultEpsilon is the float comparison's tolerance when none is given.
const DefaultEpsilon = 1e-6

// Compare reports whether got matches want under mode ("" means
// ignore_trailing_whitespace) and, if not, where they first differ.
func Compare(mode string, epsilon float64, got, want []byte) (bool, string) {
	switch mode {
	case api.CompareExact:
		if bytes.Equal(got, want) {
			return true, ""
		}
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		return false, fmt.Sprintf("outputs differ at byte %d (got %d bytes, want %d)", i, len(got), len(want))
	case api.CompareFloat:
		if epsilon <= 0 {
			epsilon = DefaultEpsilon
		}
		g, w := bytes.Fields(got), bytes.Fields(want)
		for i := 0; i < len(g) && i < len(w); i++ {
			if !tokenMatch(g[i], w[i], epsilon) {
				return false, fmt.Sprintf("token %d: got %q, want %q", i+1, clip(g[i]), clip(w[i]))
			}
		}
		if len(g) != len(w) {
			return false, fmt.Sprintf("got %d tokens, want %d", len(g), len(w))
		}
		return true, ""
	default:
		g, w := trimLines(got), trimLines(want)
		for i := 0; i < len(g) && i < len(w); i++ {
			if !bytes.Equal(g[i], w[i]) {
				return false, fmt.Sprintf("line %d: got %q, want %q", i+1, clip(g[i]), clip(w[i]))
			}
		}
		if len(g) != len(w) {
			return false, fmt.Sprintf("got %d lines, want %d", len(g), len(w))
		}
		return true, ""
	}
}

// trimLines splits b into lines without trailing whitespace, dropping trailing
// empty lines.
func trimLines(b []byte) [][]byte {
	lines := bytes.Split(b, []byte("\n"))
	for i, l := range lines {
		lines[i] = bytes.TrimRight(l, " \t\r\v\f")
	}
	for len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	return lines
}

func tokenMatch(g, w []byte, eps float64) bool {
	if bytes.Equal(g, w) {
		return true
	}
	a, err1 := strconv.ParseFloat(string(g), 64)
	b, err2 := strconv.ParseFloat(string(w), 64)
	if err1 != nil || err2 != nil || math.IsNaN(a) || math.IsNaN(b) || math.IsInf(a, 0) || math.IsInf(b, 0) {
		return false
	}
	d := math.Abs(a - b)
	return d <= eps || d <= eps*math.Abs(b)
}

func clip(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "..."
	}
	return string(b)
}
