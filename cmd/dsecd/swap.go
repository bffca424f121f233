package main

import (
	"fmt"
	"strings"

	"github.com/dsec-dev/dsec/internal/cliflag"
)

// swapFlag is dsec server --swap zram:SIZE, parsed into the device size.
type swapFlag struct{ bytes *int64 }

func (f swapFlag) String() string {
	if f.bytes == nil || *f.bytes == 0 {
		return ""
	}
	return fmt.Sprintf("zram:%d", *f.bytes)
}

func (f swapFlag) Set(s string) error {
	n, err := parseSwap(s)
	if err != nil {
		return err
	}
	*f.bytes = n
	return nil
}

func (swapFlag) Type() string { return "zram:SIZE" }

// parseSwap parses "zram:SIZE" (SIZE at least 1M, e.g. zram:4G).
func parseSwap(s string) (int64, error) {
	kind, size, ok := strings.Cut(s, ":")
	if !ok || kind != "zram" {
		return 0, fmt.Errorf("swap %q: want zram:SIZE (e.g. zram:4G)", s)
	}
	n, err := cliflag.ParseSize(size)
	if err != nil || n < 1<<20 || n > 1<<50 {
		return 0, fmt.Errorf("swap %q: SIZE must be between 1M and 1P (e.g. zram:4G)", s)
	}
	return n, nil
}
