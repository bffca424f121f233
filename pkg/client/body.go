package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
)

// Request bodies that always end.
//
// net/http's transport reports a failed request only after its goroutine that
// writes the request body has returned, and that goroutine sits in the body's
// Read. A body that blocks (a terminal's stdin, a pipe nobody writes to, an exec
// stream's input) therefore kept a request running for ever once the server had
// answered early, the connection had dropped or the context was cancelled.
// Every request with such a body goes through watchBody: the body is closed
// (its Read fails) as soon as the request's context ends, its connection
// closes, or the caller is done with the request.

// errRequestOver is what a blocked body read sees once its request is over.
var errRequestOver = errors.New("dsec client: request over")

// watchBody calls stop at most once: when ctx ends (with its error), when the
// connection carrying the request closes, or when end is called. It returns
// the context to build the request with (it observes the connection).
func watchBody(ctx context.Context, stop func(error)) (context.Context, func()) {
	conns := make(chan (<-chan struct{}), 1)
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if wc := asWatched(info.Conn); wc != nil {
			select {
			case conns <- wc.closed:
			default:
			}
		}
	}}
	done := make(chan struct{})
	var once sync.Once
	go func() {
		var closed <-chan struct{}
		for {
			select {
			case <-ctx.Done():
				stop(ctx.Err())
				return
			case closed = <-conns:
			case <-closed:
				stop(errRequestOver)
				return
			case <-done:
				stop(errRequestOver)
				return
			}
		}
	}()
	end := func() { once.Do(func() { close(done) }) }
	return httptrace.WithClientTrace(ctx, trace), end
}

// guardBody returns a body for r that the transport can always stop reading
// (see watchBody), the context to build the request with and the function that
// ends the body once the request is over (the transport's Read then fails with
// the context's error or errRequestOver). Readers that cannot block are kept as
// they are. A Read of r that is under way when the body ends still returns to
// the copying goroutine, which then stops.
func guardBody(ctx context.Context, r io.Reader) (io.Reader, context.Context, func()) {
	switch r.(type) {
	case nil, *bytes.Reader, *bytes.Buffer, *strings.Reader:
		return r, ctx, func() {}
	}
	if r == http.NoBody {
		return r, ctx, func() {}
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := io.Copy(pw, r)
		pw.CloseWithError(err) // nil: EOF
	}()
	ctx, end := watchBody(ctx, func(err error) { pw.CloseWithError(err) })
	return pr, ctx, end
}

// watchedConn tells by closed that the transport closed the connection.
type watchedConn struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

func (c *watchedConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// asWatched finds the watchedConn under c (a TLS connection wraps it).
func asWatched(c net.Conn) *watchedConn {
	for c != nil {
		if wc, ok := c.(*watchedConn); ok {
			return wc
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = u.NetConn()
	}
	return nil
}

// watchConns makes t's connections watchedConns.
func watchConns(t *http.Transport) {
	dial := t.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &watchedConn{Conn: c, closed: make(chan struct{})}, nil
	}
}
