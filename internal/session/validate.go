package session

import (
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Terminal sizes: a request without cols/rows gets DefaultTermSize; each side is
// 1..MaxTermSide cells.
const MaxTermSide = 1000

// DefaultTermSize is a TTY exec's size when the request names none.
var DefaultTermSize = api.TermSize{Cols: 80, Rows: 24}

// CheckTermSize rejects a zero, negative or huge terminal size (invalid_argument).
func CheckTermSize(ts api.TermSize) error {
	if ts.Cols < 1 || ts.Rows < 1 || ts.Cols > MaxTermSide || ts.Rows > MaxTermSide {
		return errdefs.Invalid("terminal size %dx%d: cols and rows must each be 1..%d", ts.Cols, ts.Rows, MaxTermSide)
	}
	return nil
}

// TermSizeOf checks an exec request's terminal fields and returns the size a TTY
// exec starts with (DefaultTermSize when cols and rows are both unset). Cols or
// rows without tty, or only one of them, are invalid_argument.
func TermSizeOf(req api.ExecRequest) (api.TermSize, error) {
	switch {
	case !req.TTY && (req.Cols != 0 || req.Rows != 0):
		return api.TermSize{}, errdefs.Invalid("cols and rows need tty: true")
	case !req.TTY:
		return api.TermSize{}, nil
	case req.Cols == 0 && req.Rows == 0:
		return DefaultTermSize, nil
	}
	ts := api.TermSize{Cols: req.Cols, Rows: req.Rows}
	return ts, CheckTermSize(ts)
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
