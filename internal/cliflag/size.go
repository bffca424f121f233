// Package cliflag parses and formats the command-line values dsec and dsecd
// share: sizes ("512m"), byte counts for people, list flags and egress policies.
package cliflag

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseSize parses "512m", "1G", "1.5g", "4096" (bytes) into bytes.
func ParseSize(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "b"), "i")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			mult = 1 << 10
		case 'm':
			mult = 1 << 20
		case 'g':
			mult = 1 << 30
		case 't':
			mult = 1 << 40
		}
		if mult != 1 {
			t = t[:n-1]
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("invalid size %q (examples: 512m, 1g, 1048576)", s)
	}
	return int64(f * float64(mult)), nil
}

// HumanBytes formats n bytes for people: "1.5 GiB", "12.0 MiB", "512 B".
func HumanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
