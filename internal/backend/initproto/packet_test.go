package initproto

import (
	"bytes"
	"strings"
	"testing"
)

func TestPacketRoundTrip(t *testing.T) {
	p := NewPacket("EXEC").Add("arg", "sh").Add("arg", "-c").Add("arg", "echo a=b").Add("env", "")
	b, err := p.Encode()
	if err != nil {
		t.Fatal(err)
	}
	want := "EXEC\x00arg=sh\x00arg=-c\x00arg=echo a=b\x00env=\x00"
	if string(b) != want {
		t.Fatalf("encoded %q", b)
	}
	q, err := ParsePacket(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(q.All("arg"), "|"); got != "sh|-c|echo a=b" {
		t.Fatalf("args %q", got)
	}
	if v, ok := q.Get("env"); !ok || v != "" {
		t.Fatalf("env %q %v", v, ok)
	}
}

func TestPacketErrors(t *testing.T) {
	for _, b := range []string{"", "PING", "\x00", "=\x00", "OP\x00noequals\x00", "OP\x00=v\x00", "OP\x00\x00"} {
		if _, err := ParsePacket([]byte(b)); err == nil {
			t.Errorf("ParsePacket(%q) succeeded", b)
		}
	}
	for _, p := range []*Packet{
		NewPacket(""), NewPacket("A=B"), NewPacket("OP").Add("", "v"), NewPacket("OP").Add("k=", "v"),
		NewPacket("OP").Add("k", "a\x00b"), NewPacket("OP").Add("k", strings.Repeat("x", MaxPacket)),
	} {
		if _, err := p.Encode(); err == nil {
			t.Errorf("Encode(%+v) succeeded", p)
		}
	}
}

func FuzzParsePacket(f *testing.F) {
	f.Add([]byte("PING\x00"))
	f.Add([]byte("EXITED\x00pid=5\x00status=256\x00utime_us=1\x00stime_us=2\x00maxrss_kb=3\x00"))
	f.Add([]byte("EXEC\x00arg=a=b\x00env=\x00"))
	f.Add([]byte("PS\x00proc=a:b:1:0\x00more=1\x00"))
	f.Add([]byte("\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePacket(b)
		if err != nil {
			return
		}
		out, err := p.Encode()
		if err != nil {
			if len(b) > MaxPacket {
				return
			}
			t.Fatalf("re-encode of %q: %v", b, err)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("round trip %q -> %q", b, out)
		}
		// exercise the accessors on arbitrary input
		for _, f := range p.Fields {
			_, _ = p.Int(f.Key)
		}
		if _, err := parseExit(p); err == nil && p.Op != "EXITED" {
			t.Fatalf("parseExit accepted %q", p.Op)
		}
		_, _ = parsePS(p)
	})
}
