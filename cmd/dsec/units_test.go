package main

import "testing"

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"": 0, "4096": 4096, "512m": 512 << 20, "1G": 1 << 30, "1.5g": 3 << 29, "64MiB": 64 << 20, "2k": 2048} {
		got, err := parseSize(in)
		if err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"x", "-1", "1q"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) accepted", bad)
		}
	}
}
