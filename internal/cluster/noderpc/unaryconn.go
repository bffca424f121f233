package noderpc

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/sys/unix"
)

// conns carries a Client's unary calls to a node over plain HTTP/1.1 (an
// http:// node; one over TLS goes through net/http's Transport): keep-alive
// connections, each call writing its request and reading its answer on the
// caller's goroutine. net/http's Transport hands every call to two goroutines
// of its connection (one writes, one reads) and back; at thousands of creates a
// second those hand-offs, and the garbage of a generic client, were a tenth of
// an API server's CPU. What it did for unary calls is done here too: a pooled
// connection the node closed while idle is noticed before it is used (the
// call goes on a fresh one), a call's context ends it at once (its connection
// is closed), and idle connections go after IdleConnTimeout.
type conns struct {
	addr, host string // dial address (host:port), Host header
	base       string // the base URL's path ("" or "/prefix")
	dial       func(ctx context.Context, network, addr string) (net.Conn, error)

	mu     sync.Mutex
	idle   []*conn // most recently used last
	closed bool
}

// conn is one keep-alive connection.
type conn struct {
	net.Conn
	br   *bufio.Reader
	bw   *bufio.Writer
	used time.Time // when it went idle
}

const (
	// connIdleTimeout: an idle connection older than this is closed, as the
	// Transport's IdleConnTimeout.
	connIdleTimeout = 90 * time.Second
	connBufSize     = 4 << 10
)

// newConns returns the pool for baseURL (http://host[:port]), or nil for a URL
// it does not serve (https://: net/http's Transport carries those).
func newConns(baseURL string, d *net.Dialer) *conns {
	u, err := url.Parse(baseURL)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil
	}
	port := u.Port()
	if port == "" {
		port = "80"
	}
	return &conns{addr: net.JoinHostPort(u.Hostname(), port), host: u.Host, base: strings.TrimSuffix(u.EscapedPath(), "/"),
		dial: d.DialContext}
}

// get returns a live idle connection, or a new one.
func (p *conns) get(ctx context.Context) (*conn, error) {
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			break
		}
		c := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if time.Since(c.used) < connIdleTimeout && c.alive() {
			return c, nil
		}
		c.Close()
	}
	nc, err := p.dial(ctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	return &conn{Conn: nc, br: bufio.NewReaderSize(nc, connBufSize), bw: bufio.NewWriterSize(nc, connBufSize)}, nil
}

// put keeps c for the next call (at most unaryIdlePerNode are kept).
func (p *conns) put(c *conn) {
	c.used = time.Now()
	p.mu.Lock()
	if !p.closed && len(p.idle) < unaryIdlePerNode {
		p.idle = append(p.idle, c)
		c = nil
	}
	p.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// close closes the idle connections, and every connection put back later.
func (p *conns) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, c := range idle {
		c.Close()
	}
}

// alive reports whether an idle connection can carry a call: the node has not
// closed it (or reset it) and sent nothing unasked. It peeks without waiting.
func (c *conn) alive() bool {
	if c.br.Buffered() > 0 {
		return false // bytes nobody asked for
	}
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var b [1]byte
	live := false
	if err := rc.Read(func(fd uintptr) bool {
		n, _, rerr := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		live = n < 0 && (errors.Is(rerr, unix.EAGAIN) || errors.Is(rerr, unix.EWOULDBLOCK))
		return true // never wait for readiness
	}); err != nil {
		return false
	}
	return live
}

// aLongTimeAgo is a deadline in the past: it ends a blocked read or write.
var aLongTimeAgo = time.Unix(1, 0)

// roundTrip POSTs body to path on a connection of the pool and returns the
// answer with its body read whole; ctx's trace context and step tag go along.
func (p *conns) roundTrip(ctx context.Context, path, auth string, body []byte) (*http.Response, []byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	c, err := p.get(ctx)
	if err != nil {
		return nil, nil, err
	}
	// The context ends the call at once: a deadline in the past ends the
	// write or read it is blocked in (the connection is then closed).
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(aLongTimeAgo) })
	resp, res, err := c.exchange(ctx, p.host, p.base+path, auth, body)
	if !stop() {
		err = context.Cause(ctx)
	}
	if err != nil || resp.Close {
		c.Close()
	} else {
		p.put(c)
	}
	return resp, res, err
}

// exchange writes one request and reads its answer.
func (c *conn) exchange(ctx context.Context, host, path, auth string, body []byte) (*http.Response, []byte, error) {
	w := c.bw
	w.WriteString("POST ")
	w.WriteString(path)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(host)
	w.WriteString("\r\nContent-Type: application/json\r\nContent-Length: ")
	w.WriteString(strconv.Itoa(len(body)))
	w.WriteString("\r\nAuthorization: ")
	w.WriteString(auth)
	w.WriteString("\r\n")
	injectTrace(ctx, headerWriter{w})
	injectStep(ctx, headerWriter{w})
	w.WriteString("\r\n")
	w.Write(body)
	if err := w.Flush(); err != nil {
		return nil, nil, err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return nil, nil, err
	}
	res, err := readBody(resp.Body, resp.ContentLength)
	resp.Body.Close()
	if err != nil {
		return nil, nil, err
	}
	return resp, res, nil
}

// headerWriter writes request headers (Set; propagation.TextMapCarrier for
// the trace context), dropping a name or value that could break the request
// apart: only a client of this package's own makes them, never a user.
type headerWriter struct{ w *bufio.Writer }

func (h headerWriter) Set(k, v string) {
	if !validHeader(k, v) {
		return
	}
	h.w.WriteString(k)
	h.w.WriteString(": ")
	h.w.WriteString(v)
	h.w.WriteString("\r\n")
}

func (headerWriter) Get(string) string { return "" }
func (headerWriter) Keys() []string    { return nil }

// validHeader accepts a header name of token characters and a value of
// visible characters, spaces and tabs (RFC 9110 field-name, field-value).
func validHeader(k, v string) bool {
	return httpguts.ValidHeaderFieldName(k) && httpguts.ValidHeaderFieldValue(v)
}
