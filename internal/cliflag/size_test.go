package cliflag

import "testing"

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"": 0, "4096": 4096, "512m": 512 << 20, "1G": 1 << 30, "1.5g": 3 << 29, "64MiB": 64 << 20, "2k": 2048} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"x", "-1", "1q"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
}
