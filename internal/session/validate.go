package session

import (
	"encoding/base64"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Terminal sizes: a request without cols/rows gets DefaultTermSize; each side is
// 1..MaxTermSide cells.
const MaxTermSide = api.MaxTermSide

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

// MaxOutputBytes is the largest max_output_bytes an exec may ask for.
const MaxOutputBytes = 64 << 20

// Create limits: what a sandbox may ask for at most.
const (
	MaxCPU          = 1024 // cores
	MaxRequestIDLen = 256  // bytes of request_id
)

// ValidateExec checks an exec request (blocking, streaming or background) as
// far as it can be checked without its sandbox: one invalid_argument per
// mistake, naming the field. Every session implementation calls it once, where
// the request arrives (the node agent); front ends pass requests through.
func ValidateExec(req api.ExecRequest) error {
	switch {
	case len(req.Cmd) == 0 && req.Shell == "":
		return errdefs.Invalid("exactly one of cmd and shell is required; neither is set")
	case len(req.Cmd) > 0 && req.Shell != "":
		return errdefs.Invalid("exactly one of cmd and shell is allowed; both are set")
	case len(req.Cmd) > 0 && req.Cmd[0] == "":
		return errdefs.Invalid("cmd[0] (the program) is empty")
	case req.TimeoutMs < 0:
		return errdefs.Invalid("timeout_ms is negative (%d)", req.TimeoutMs)
	case req.MaxOutputBytes < 0 || req.MaxOutputBytes > MaxOutputBytes:
		return errdefs.Invalid("max_output_bytes must be between 0 and %d, got %d", MaxOutputBytes, req.MaxOutputBytes)
	case req.Stdin != "" && req.StdinBase64 != "":
		return errdefs.Invalid("stdin and stdin_base64 are mutually exclusive")
	}
	switch req.OutputEncoding {
	case "", "utf8", "base64":
	default:
		return errdefs.Invalid("output_encoding %q is not one of utf8, base64", req.OutputEncoding)
	}
	if req.StdinBase64 != "" {
		if _, err := base64.StdEncoding.DecodeString(req.StdinBase64); err != nil {
			return errdefs.Invalid("stdin_base64 is not valid base64: %v", err)
		}
	}
	for i, a := range req.Cmd {
		if strings.IndexByte(a, 0) >= 0 {
			return errdefs.Invalid("cmd[%d] contains a NUL byte", i)
		}
	}
	for _, f := range []struct{ name, v string }{{"shell", req.Shell}, {"cwd", req.Cwd}, {"user", req.User}} {
		if strings.IndexByte(f.v, 0) >= 0 {
			return errdefs.Invalid("%s contains a NUL byte", f.name)
		}
	}
	if _, err := TermSizeOf(req); err != nil {
		return err
	}
	return validateEnv("env", req.Env)
}

// ValidateCreate checks that a create request is well formed: one
// invalid_argument per mistake, naming the field. Zero means "the default"
// everywhere. The /v1 front end calls it before any interceptor counts the
// request against a quota (a negative size would lower a project's usage); the
// node agent calls it for every other caller, and then checks what the node
// can run (the smallest memory and disk).
func ValidateCreate(req api.CreateSandboxRequest) error {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"memory_bytes", req.MemoryBytes}, {"disk_bytes", req.DiskBytes}, {"pids_max", req.PidsMax},
		{"ttl_seconds", req.TTLSeconds}, {"idle_timeout_seconds", req.IdleTimeoutSeconds},
	} {
		if f.v < 0 {
			return errdefs.Invalid("%s is negative (%d)", f.name, f.v)
		}
	}
	switch {
	case req.TTLSeconds > api.MaxTimeoutSeconds:
		return errdefs.Invalid("ttl_seconds is more than %d (a year)", api.MaxTimeoutSeconds)
	case !validExpiry(req.OnExpiry):
		return errdefs.Invalid("on_expiry must be %q or %q, got %q", api.ExpiryDelete, api.ExpiryPause, req.OnExpiry)
	case !(req.CPU >= 0 && req.CPU <= MaxCPU): // NaN too
		return errdefs.Invalid("cpu must be between 0 and %d cores, got %g", MaxCPU, req.CPU)
	case len(req.RequestID) > MaxRequestIDLen:
		return errdefs.Invalid("request_id is longer than %d bytes", MaxRequestIDLen)
	}
	return validateEnv("env", req.Env)
}

// ValidateDeadline checks a deadline request: one invalid_argument per mistake.
func ValidateDeadline(req api.DeadlineRequest) error {
	switch {
	case req.TimeoutSeconds < 0:
		return errdefs.Invalid("timeout_seconds is negative (%d)", req.TimeoutSeconds)
	case req.TimeoutSeconds > api.MaxTimeoutSeconds:
		return errdefs.Invalid("timeout_seconds is more than %d (a year)", api.MaxTimeoutSeconds)
	case !validExpiry(req.OnExpiry):
		return errdefs.Invalid("on_expiry must be %q or %q, got %q", api.ExpiryDelete, api.ExpiryPause, req.OnExpiry)
	}
	return nil
}

func validExpiry(s string) bool { return s == "" || s == api.ExpiryDelete || s == api.ExpiryPause }

// validateEnv rejects names and values an environment cannot hold.
func validateEnv(field string, env map[string]string) error {
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return errdefs.Invalid("%s: invalid variable name %q", field, k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return errdefs.Invalid("%s: value of %q contains a NUL byte", field, k)
		}
	}
	return nil
}
