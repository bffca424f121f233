package noderpc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/dsec-dev/dsec/internal/cluster/noderpc/noderpcpb"
	"github.com/dsec-dev/dsec/internal/cluster/placement"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Error is an error a node answered (or a transport failure, as unavailable): the
// wire error with its flags, and the Retry-After the node asked for. It unwraps
// to the *api.Error, so errdefs.CodeOf and errdefs.ToAPI see its class.
type Error struct {
	API *api.Error
	// RetryAfter is how long the node asked the caller to wait (0: no advice).
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.API.Error() }

func (e *Error) Unwrap() error { return e.API }

// RetryAfter returns the Retry-After advice err carries: from a node (through a
// Client) or from the placement engine.
func RetryAfter(err error) (time.Duration, bool) {
	var e *Error
	if errors.As(err, &e) && e.RetryAfter > 0 {
		return e.RetryAfter, true
	}
	return placement.RetryAfter(err)
}

// toWire turns a service error into a Connect error carrying its ErrorInfo.
func toWire(err error) error {
	if err == nil {
		return nil
	}
	ae := errdefs.ToAPI(err)
	info := &noderpcpb.ErrorInfo{Code: string(ae.Code), Message: ae.Message,
		Infrastructure: ae.Infrastructure, Retryable: ae.Retryable}
	if d, ok := RetryAfter(err); ok {
		info.RetryAfterMs = max(d.Milliseconds(), 1)
	}
	// The Connect code is for proxies and logs; the client reads the class
	// from ErrorInfo.
	ce := connect.NewError(errdefs.ConnectCode(ae.Code), errors.New(ae.Message))
	if d, err := connect.NewErrorDetail(info); err == nil {
		ce.AddDetail(d)
	}
	return ce
}

// fromWire turns what a call returned into the error the caller sees: the node's
// classified error, the caller's own context error, or (anything else: the
// transport failed) unavailable with infrastructure set.
func fromWire(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		for _, d := range ce.Details() {
			v, derr := d.Value()
			if info, ok := v.(*noderpcpb.ErrorInfo); derr == nil && ok {
				return &Error{
					API: &api.Error{Code: api.Code(info.Code), Message: info.Message,
						Infrastructure: info.Infrastructure, Retryable: info.Retryable,
						Status: api.StatusOf(api.Code(info.Code))},
					RetryAfter: time.Duration(info.RetryAfterMs) * time.Millisecond,
				}
			}
		}
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("noderpc %s: %w", op, cerr)
	}
	if ce != nil {
		// Refused by the RPC layer itself, before any service ran.
		if code, ok := errdefs.FromConnectLayer(ce.Code()); ok {
			return &Error{API: api.NewError(code, "node rpc %s: %s", op, ce.Message())}
		}
	}
	return unavailable(op, err)
}

// unavailable classifies a transport failure.
func unavailable(op string, err error) error {
	return &Error{API: api.NewError(api.CodeUnavailable, "node rpc %s: node unreachable: %v", op, err)}
}
