package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/pkg/api"
)

func TestParseTermSize(t *testing.T) {
	for in, want := range map[string]api.TermSize{"120x40": {Cols: 120, Rows: 40}, "1X1": {Cols: 1, Rows: 1}, "1000x1000": {Cols: 1000, Rows: 1000}} {
		if got, err := parseTermSize(in); err != nil || got != want {
			t.Errorf("%q: %+v %v, want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "80x", "x24", "0x24", "80x0", "-1x24", "1001x24", "80x1001", "80x24x1", " 80x24", "80 x24", "+80x24", "080x24", "0x50x24", "80,24", "abc"} {
		if sz, err := parseTermSize(in); err == nil || !strings.Contains(err.Error(), "--size") {
			t.Errorf("%q accepted as %+v (%v)", in, sz, err)
		}
	}
}

// FuzzParseTermSize: whatever the input, an accepted size is in range and
// written exactly as COLSxROWS.
func FuzzParseTermSize(f *testing.F) {
	for _, s := range []string{"80x24", "0x0", "1000x1", "1001x1", "-5x3", "9999999999999999999x1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sz, err := parseTermSize(s)
		if err != nil {
			return
		}
		if sz.Cols < 1 || sz.Rows < 1 || sz.Cols > maxTermDim || sz.Rows > maxTermDim {
			t.Fatalf("%q gave %+v", s, sz)
		}
		if fmt.Sprintf("%dx%d", sz.Cols, sz.Rows) != strings.ToLower(s) {
			t.Fatalf("%q gave %+v", s, sz)
		}
	})
}
