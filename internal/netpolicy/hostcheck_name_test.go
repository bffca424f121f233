package netpolicy

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestReadName: the host check finds the name a TLS ClientHello (SNI) or an
// HTTP request (Host) asks for, canonical, and hands back every byte it read
// so the flow can be replayed to the server unchanged; without a name, or
// with something else, it has none.
func TestReadName(t *testing.T) {
	hello := func(sni string) func(net.Conn) {
		return func(c net.Conn) {
			_ = tls.Client(c, &tls.Config{ServerName: sni, InsecureSkipVerify: true}).Handshake()
		}
	}
	write := func(s string) func(net.Conn) {
		return func(c net.Conn) { _, _ = io.WriteString(c, s) }
	}
	for _, c := range []struct {
		what  string
		send  func(net.Conn)
		want  string
		noErr bool
	}{
		{"tls", hello("PyPI.org"), "pypi.org", true},
		{"tls without sni", hello(""), "", false},
		{"http", write("GET /simple/ HTTP/1.1\r\nHost: Files.Example.com.:8080\r\nUser-Agent: x\r\n\r\nbody"), "files.example.com", true},
		{"http/1.0 without host", write("GET / HTTP/1.0\r\n\r\n"), "", false},
		{"not http", write("SSH-2.0-OpenSSH_9.6\r\n"), "", false},
	} {
		a, b := net.Pipe()
		var sent bytes.Buffer
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.send(recorder{Conn: a, w: &sent})
			a.Close()
		}()
		_ = b.SetReadDeadline(time.Now().Add(5 * time.Second))
		name, head, err := readName(b)
		b.Close()
		<-done
		if name != c.want || (err == nil) != c.noErr {
			t.Errorf("%s: name %q, err %v; want %q (error: %v)", c.what, name, err, c.want, !c.noErr)
		}
		if c.noErr && !bytes.HasPrefix(sent.Bytes(), head) || c.noErr && len(head) == 0 {
			t.Errorf("%s: read %d bytes that are not what the client sent first", c.what, len(head))
		}
	}

	// Nothing sent: the deadline ends the wait.
	a, b := net.Pipe()
	defer a.Close()
	_ = b.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	var ne net.Error
	if _, _, err := readName(b); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("silent client: %v, want a timeout", err)
	}
	// More than maxHello bytes of request head: given up.
	a2, b2 := net.Pipe()
	go func() {
		_, _ = io.WriteString(a2, "GET / HTTP/1.1\r\nX: "+strings.Repeat("a", maxHello)+"\r\n\r\n")
		a2.Close()
	}()
	if _, head, err := readName(b2); err == nil || len(head) > maxHello {
		t.Fatalf("oversized head: read %d bytes, %v; want an error within %d bytes", len(head), err, maxHello)
	}
}

// recorder keeps a copy of what is written to the connection.
type recorder struct {
	net.Conn
	w *bytes.Buffer
}

func (r recorder) Write(b []byte) (int, error) {
	r.w.Write(b)
	return r.Conn.Write(b)
}
