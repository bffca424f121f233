package session

import (
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Terminal sizes: a request without cols/rows gets DefaultTermSize; each side is
// 1..MaxTermSide cells.
const MaxTermSide = api.MaxTermSide

// DefaultTermSize is a TTY exec's size when the request names none.
var DefaultTermSize = api.TermSize{Cols: 80, Rows: 24}

// CheckTermSize rejects a zero, negative or huge terminal size (invalid_argument).
func CheckTermSize(ts api.TermSize) error { return ts.Validate() }

// TermSizeOf returns the size a TTY exec starts with (DefaultTermSize when
// cols and rows are both unset); its terminal fields are checked as in
// api.ExecRequest.ValidateTerm.
func TermSizeOf(req api.ExecRequest) (api.TermSize, error) {
	if err := req.ValidateTerm(); err != nil || !req.TTY {
		return api.TermSize{}, err
	}
	if req.Cols == 0 && req.Rows == 0 {
		return DefaultTermSize, nil
	}
	return api.TermSize{Cols: req.Cols, Rows: req.Rows}, nil
}

// CheckControl checks one control message for a streaming exec (tty says whether
// it runs on a terminal): exactly one field set, a signal in 1..64, a resize only
// on a terminal and of a valid size.
func CheckControl(c Control, tty bool) error {
	switch {
	case (c.Signal != 0) == (c.Resize != nil):
		return errdefs.Invalid("a control message carries exactly one of a signal and a resize")
	case c.Resize != nil && !tty:
		return errdefs.Invalid("resize: the exec has no terminal (start it with tty: true)")
	case c.Resize != nil:
		return CheckTermSize(*c.Resize)
	case c.Signal < 1 || c.Signal > 64:
		return errdefs.Invalid("signal number %d out of range 1..64", c.Signal)
	}
	return nil
}

// Request limits (api.ExecRequest.Validate, api.CreateSandboxRequest.Validate).
const (
	MaxOutputBytes  = api.MaxOutputBytes
	MaxCPU          = api.MaxCPU
	MaxRequestIDLen = api.MaxRequestIDLen
)

// ValidateDeadline checks a deadline request: one invalid_argument per mistake.
func ValidateDeadline(req api.DeadlineRequest) error {
	switch {
	case req.TimeoutSeconds < 0:
		return errdefs.Invalid("timeout_seconds is negative (%d)", req.TimeoutSeconds)
	case req.TimeoutSeconds > api.MaxTimeoutSeconds:
		return errdefs.Invalid("timeout_seconds is more than %d (a year)", api.MaxTimeoutSeconds)
	case !validExpiry(req.OnExpiry):
		return errdefs.Invalid("on_expiry must be %q, %q or %q, got %q", api.ExpiryDelete, api.ExpiryPause, api.ExpiryPauseFilesystem, req.OnExpiry)
	}
	return nil
}

func validExpiry(s string) bool {
	return s == "" || s == api.ExpiryDelete || s == api.ExpiryPause || s == api.ExpiryPauseFilesystem
}
