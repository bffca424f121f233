package noderpc

import (
	"context"
	"crypto/tls"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Defaults for the keepalive machinery: a connection that has been silent for
// PingInterval is pinged, and one whose ping is not answered within PingTimeout
// is closed (its calls and streams fail with unavailable).
const (
	DefaultPingInterval = 10 * time.Second
	DefaultPingTimeout  = 5 * time.Second
	// DefaultMaxSkew is how far a token's time stamp may be from the handler's
	// clock.
	DefaultMaxSkew = 5 * time.Minute
	// chunkSize is the largest data frame a stream sends.
	chunkSize = 64 << 10
)

// HandlerOptions configure NewHandler.
type HandlerOptions struct {
	// Secret is the cluster secret (LoadSecret) every request's token must be
	// signed with. Empty refuses every request (there is no unauthenticated mode).
	Secret []byte
	// MaxSkew bounds the age of a token (default DefaultMaxSkew).
	MaxSkew time.Duration
	// Status answers NodeStatus; nil: a status made from Info and List.
	Status func(ctx context.Context) (Status, error)
	// Observer is told about every request (RPC metrics); nil: nobody.
	Observer Observer
	Logger   *slog.Logger
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// ClientOptions configure NewClient.
type ClientOptions struct {
	// Secret is the cluster secret the client signs its requests with.
	Secret []byte
	// TLS, when set, makes the client speak HTTP/2 over TLS (baseURL https://);
	// otherwise it speaks h2c to an http:// baseURL.
	TLS *tls.Config
	// DialTimeout bounds connecting to the node (default 5 s).
	DialTimeout time.Duration
	// PingInterval and PingTimeout tune keepalive pings (defaults above).
	PingInterval time.Duration
	PingTimeout  time.Duration
	// Now is the clock tokens are stamped with (tests); default time.Now.
	Now func() time.Time
	// Tracer makes a client span per call ("noderpc.Create", ...; the node's
	// spans are its children); nil: none (the trace context still crosses).
	Tracer trace.TracerProvider
}

// ServerOptions configure NewServer.
type ServerOptions struct {
	// TLS, when set, serves HTTP/2 over TLS; otherwise h2c (and HTTP/1.1).
	TLS *tls.Config
	// PingInterval and PingTimeout tune keepalive pings (defaults above).
	PingInterval time.Duration
	PingTimeout  time.Duration
	Logger       *slog.Logger
}

// Status is a node's answer to NodeStatus: what a placement engine needs to
// know about it.
type Status struct {
	Node     string   `json:"node"`
	Version  string   `json:"version,omitempty"`
	Backends []string `json:"backends"`
	// Sandboxes is how many sandboxes the node holds, Running how many of them
	// run (not paused or exited); MaxSandboxes its admission limit (0: unknown).
	Sandboxes    int `json:"sandboxes"`
	Running      int `json:"running"`
	MaxSandboxes int `json:"max_sandboxes,omitempty"`
	// CPU and MemoryBytes add up the limits of the node's sandboxes.
	CPU         float64 `json:"cpu"`
	MemoryBytes int64   `json:"memory_bytes"`
	// Layers are the digests of the image layers the node has mounted (image
	// locality for placement); empty when unknown.
	Layers []string `json:"layers,omitempty"`
}
