package main

import "testing"

func TestParseSwap(t *testing.T) {
	for in, want := range map[string]int64{"zram:4G": 4 << 30, "zram:512m": 512 << 20, "zram:1048576": 1 << 20} {
		if got, err := parseSwap(in); err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "zram", "zram:", "file:/swap:1G", "zram:-1G", "zram:1K", "zram:9999999T", "zram:G", "ZRAM:1G"} {
		if _, err := parseSwap(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzParseSwap(f *testing.F) {
	for _, s := range []string{"zram:4G", "zram:1", "zram:-5", "zram:1.5g", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n, err := parseSwap(s); err == nil && (n < 1<<20 || n > 1<<50) {
			t.Fatalf("%q accepted as %d bytes", s, n)
		}
	})
}
