package reclaim

import (
	"bufio"
	"strings"
	"testing"
)

const sampleMaps = `55d0c0a00000-55d0c0a21000 r--p 00000000 fd:01 1234 /usr/bin/python3.11
55d0c2b00000-55d0c2d00000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0004001000 rw-p 00000000 00:00 0
7f0010000000-7f0010001000 rw-s 00000000 00:05 99 /dev/zero (deleted)
7f0020000000-7f0020010000 rw-p 00001000 fd:01 777 /usr/lib/libc.so.6
7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0 [stack]
7ffc00100000-7ffc00104000 r--p 00000000 00:00 0 [vvar]
7ffc00104000-7ffc00106000 r-xp 00000000 00:00 0 [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]
garbage line
0-0 rw-p 0 0 0
`

func TestParseMaps(t *testing.T) {
	rs, err := parseMaps(bufio.NewScanner(strings.NewReader(sampleMaps)))
	if err != nil {
		t.Fatal(err)
	}
	want := []Range{{0x55d0c2b00000, 0x55d0c2d00000}, {0x7f0000000000, 0x7f0004001000}, {0x7ffc00000000, 0x7ffc00021000}}
	if len(rs) != len(want) {
		t.Fatalf("ranges %x, want %x", rs, want)
	}
	for i := range want {
		if rs[i] != want[i] {
			t.Errorf("range %d: %x, want %x", i, rs[i], want[i])
		}
	}
}

func FuzzParseMaps(f *testing.F) {
	f.Add(sampleMaps)
	f.Add("1-2 rw-p 0 0 0\n")
	f.Fuzz(func(t *testing.T, s string) {
		rs, _ := parseMaps(bufio.NewScanner(strings.NewReader(s)))
		for _, r := range rs {
			if r.End <= r.Start {
				t.Fatalf("empty or inverted range %x", r)
			}
		}
	})
}
