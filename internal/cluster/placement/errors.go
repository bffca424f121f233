package placement

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
)

// ExhaustedError is the resource_exhausted error the engine returns when nothing
// fits: it carries how long the caller should wait before trying again (the HTTP
// layer sends it as Retry-After). errdefs.CodeOf classifies it as
// resource_exhausted.
type ExhaustedError struct {
	RetryAfter time.Duration
	err        *errdefs.Error
}

func exhausted(retryAfter time.Duration, format string, args ...any) error {
	e := errdefs.Exhausted(retryAfter, format, args...).(*errdefs.Error) // the HTTP layer sends it as Retry-After
	return &ExhaustedError{RetryAfter: retryAfter, err: e}
}

func (e *ExhaustedError) Error() string {
	return fmt.Sprintf("%s (retry after %s)", e.err.Error(), e.RetryAfter)
}

func (e *ExhaustedError) Unwrap() error { return e.err }

// RetryAfter returns the Retry-After duration an error from this package carries.
func RetryAfter(err error) (time.Duration, bool) {
	var e *ExhaustedError
	if errors.As(err, &e) {
		return e.RetryAfter, true
	}
	return 0, false
}

// RetryAfterHeader is the HTTP Retry-After value for err: whole seconds, rounded
// up, at least 1; "" when err carries none.
func RetryAfterHeader(err error) string {
	d, ok := RetryAfter(err)
	if !ok {
		return ""
	}
	secs := int64((d + time.Second - 1) / time.Second)
	return strconv.FormatInt(max(secs, 1), 10)
}
