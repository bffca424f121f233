// Package errdefs classifies internal errors by the API error code they map to, so
// every layer can wrap causes with %w and the HTTP layer can still answer with a
// stable code, status and infrastructure flag.
package errdefs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// Error is a classified error that keeps its cause for logs and errors.Is.
type Error struct {
	Code  api.Code
	Msg   string
	Cause error
	// RetryAfter, when positive, is how long the caller should wait before
	// repeating the request (the HTTP layer sends it as Retry-After).
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return e.Msg + ": " + e.Cause.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Cause }

// New returns a classified error with a formatted message.
func New(code api.Code, format string, args ...any) error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Wrap classifies cause under code with a message prefix.
func Wrap(code api.Code, cause error, format string, args ...any) error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...), Cause: cause}
}

// Exhausted is a resource_exhausted error that tells the caller to retry after d.
func Exhausted(d time.Duration, format string, args ...any) error {
	return &Error{Code: api.CodeResourceExhausted, Msg: fmt.Sprintf(format, args...), RetryAfter: d}
}

// RetryAfter is the retry delay the first classified error in err's chain that
// states one carries.
func RetryAfter(err error) (time.Duration, bool) {
	switch e := err.(type) {
	case nil:
		return 0, false
	case *Error:
		if e.RetryAfter > 0 {
			return e.RetryAfter, true
		}
	case interface{ Unwrap() []error }:
		for _, c := range e.Unwrap() {
			if d, ok := RetryAfter(c); ok {
				return d, true
			}
		}
		return 0, false
	}
	return RetryAfter(errors.Unwrap(err))
}

// Convenience constructors for the common classes.
func NotFound(format string, args ...any) error { return New(api.CodeNotFound, format, args...) }
func Invalid(format string, args ...any) error  { return New(api.CodeInvalidArgument, format, args...) }
func Conflict(format string, args ...any) error { return New(api.CodeConflict, format, args...) }
func Internal(cause error, format string, args ...any) error {
	return Wrap(api.CodeInternal, cause, format, args...)
}

// CodeOf returns the code of the outermost classified error in err's chain; context
// errors map to deadline_exceeded, everything unclassified to internal.
func CodeOf(err error) api.Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae.Code
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return api.CodeDeadlineExceeded
	}
	return api.CodeInternal
}

// Is reports whether err is classified with code.
func Is(err error, code api.Code) bool { return err != nil && CodeOf(err) == code }

// ToAPI converts any error into the wire error.
func ToAPI(err error) *api.Error {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae
	}
	return api.NewError(CodeOf(err), "%s", err.Error())
}
