package mountinfo

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	const text = `22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
98 27 0:53 / /run/dsec/a\040b rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,favordynmods,name=dsec-favordynmods
garbage line
99 27 0:54 / /run/dsec/a\040b rw,relatime - tmpfs top rw,size=1024k
`
	ms, err := Parse(strings.NewReader(text))
	if err != nil || len(ms) != 3 {
		t.Fatalf("%d mounts (%v): %+v", len(ms), err, ms)
	}
	want := Mount{ID: 98, Dev: "0:53", Point: "/run/dsec/a b", Opts: "rw,nosuid,nodev,noexec,relatime",
		FSType: "cgroup", Source: "cgroup", Supers: "rw,favordynmods,name=dsec-favordynmods"}
	if ms[1] != want {
		t.Errorf("got %+v\nwant %+v", ms[1], want)
	}
	if ms[0].FSType != "proc" || ms[0].Point != "/proc" { // an optional field before "-"
		t.Errorf("proc: %+v", ms[0])
	}
	if !HasOpt(ms[1].Supers, "favordynmods") || HasOpt(ms[1].Supers, "favor") {
		t.Error("HasOpt matches parts of options")
	}
	for in, out := range map[string]string{`a\040b`: "a b", `a\134b`: `a\b`, `a\0`: `a\0`, `\011`: "\t", "plain": "plain"} {
		if got := Unescape(in); got != out {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, out)
		}
	}
}
