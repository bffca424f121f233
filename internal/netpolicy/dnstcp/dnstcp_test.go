package dnstcp_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/dsec-dev/dsec/internal/netpolicy/dnstcp"
)

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	msgs := [][]byte{[]byte("first"), {}, bytes.Repeat([]byte{7}, 300)}
	for _, m := range msgs {
		if err := dnstcp.Write(&buf, m); err != nil {
			t.Fatal(err)
		}
	}
	if got := buf.Bytes()[:2]; !bytes.Equal(got, []byte{0, 5}) {
		t.Fatalf("prefix %v, want the length big-endian", got)
	}
	for _, want := range msgs {
		got, err := dnstcp.Read(&buf)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("read %q %v, want %q", got, err, want)
		}
	}
	if _, err := dnstcp.Read(&buf); !errors.Is(err, io.EOF) {
		t.Fatalf("at the end: %v, want EOF", err)
	}
	if _, err := dnstcp.Read(bytes.NewReader([]byte{0, 9, 'x'})); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut message: %v, want unexpected EOF", err)
	}
	if err := dnstcp.Write(io.Discard, make([]byte, 70000)); err == nil {
		t.Fatal("a message over 65535 bytes was framed")
	}
}
