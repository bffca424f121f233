package noderpc

import (
	"log/slog"
	"net/http"
	"time"
)

// NewServer is an HTTP server for a Node RPC handler (h: the mux NewHandler's
// path and handler are mounted on): HTTP/2 without TLS (h2c), or over TLS with
// opts.TLS, with keepalive pings so that a client that vanished without
// closing its connection ends its streams. The caller runs Serve (or ServeTLS
// with opts.TLS set) on its listener.
func NewServer(h http.Handler, opts ServerOptions) *http.Server {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	if opts.TLS != nil {
		p.SetHTTP2(true)
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	srv := &http.Server{
		Handler:           h,
		Protocols:         p,
		TLSConfig:         opts.TLS,
		ReadHeaderTimeout: 10 * time.Second,
		HTTP2:             http2Config(opts.PingInterval, opts.PingTimeout),
	}
	// Streams (exec, dial, waits) are long-lived: allow many per connection;
	// a client opens another connection beyond it.
	srv.HTTP2.MaxConcurrentStreams = maxStreams
	if opts.Logger != nil {
		srv.ErrorLog = slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn)
	}
	return srv
}

// maxStreams is how many streams a server allows on one connection.
const maxStreams = 1000

// http2Config sets the keepalive pings of a server or transport.
func http2Config(interval, timeout time.Duration) *http.HTTP2Config {
	if interval <= 0 {
		interval = DefaultPingInterval
	}
	if timeout <= 0 {
		timeout = DefaultPingTimeout
	}
	return &http.HTTP2Config{SendPingTimeout: interval, PingTimeout: timeout}
}
