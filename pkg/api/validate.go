package api

import (
	"encoding/base64"
	"errors"
	"strings"
	"time"
)

// Request limits that Validate enforces.
const (
	// MaxOutputBytes is the largest max_output_bytes an exec may ask for.
	MaxOutputBytes = 64 << 20
	// MaxCPU is the most cores a sandbox may ask for.
	MaxCPU = 1024
	// MaxRequestIDLen is the longest request_id, in bytes.
	MaxRequestIDLen = 256
	// MaxBatch bounds the sandboxes of one POST /v1/sandboxes:batch.
	MaxBatch = 100_000
)

// invalid is the error of a malformed request: invalid_argument.
func invalid(format string, args ...any) *Error {
	return NewError(CodeInvalidArgument, format, args...)
}

// Validate rejects a zero, negative or huge terminal size (invalid_argument).
func (ts TermSize) Validate() error {
	if ts.Cols < 1 || ts.Rows < 1 || ts.Cols > MaxTermSide || ts.Rows > MaxTermSide {
		return invalid("terminal size %dx%d: cols and rows must each be 1..%d", ts.Cols, ts.Rows, MaxTermSide)
	}
	return nil
}

// ValidateTerm checks an exec request's terminal fields: cols or rows without
// tty, only one of them, or a bad size are invalid_argument.
func (r ExecRequest) ValidateTerm() error {
	switch {
	case !r.TTY && (r.Cols != 0 || r.Rows != 0):
		return invalid("cols and rows need tty: true")
	case !r.TTY, r.Cols == 0 && r.Rows == 0:
		return nil
	}
	return TermSize{Cols: r.Cols, Rows: r.Rows}.Validate()
}

// Validate checks an exec request (blocking, streaming or background) as far
// as it can be checked without its sandbox: one invalid_argument per mistake,
// naming the field. The session service's validating interceptor
// (session.Validating) calls it once per request, at the top of every role's
// chain; see docs/architecture.md.
func (r ExecRequest) Validate() error {
	switch {
	case len(r.Cmd) == 0 && r.Shell == "":
		return invalid("exactly one of cmd and shell is required; neither is set")
	case len(r.Cmd) > 0 && r.Shell != "":
		return invalid("exactly one of cmd and shell is allowed; both are set")
	case len(r.Cmd) > 0 && r.Cmd[0] == "":
		return invalid("cmd[0] (the program) is empty")
	case r.TimeoutMs < 0:
		return invalid("timeout_ms is negative (%d)", r.TimeoutMs)
	case r.MaxOutputBytes < 0 || r.MaxOutputBytes > MaxOutputBytes:
		return invalid("max_output_bytes must be between 0 and %d, got %d", MaxOutputBytes, r.MaxOutputBytes)
	case r.Stdin != "" && r.StdinBase64 != "":
		return invalid("stdin and stdin_base64 are mutually exclusive")
	}
	switch r.OutputEncoding {
	case "", "utf8", "base64":
	default:
		return invalid("output_encoding %q is not one of utf8, base64", r.OutputEncoding)
	}
	if r.StdinBase64 != "" {
		if _, err := base64.StdEncoding.DecodeString(r.StdinBase64); err != nil {
			return invalid("stdin_base64 is not valid base64: %v", err)
		}
	}
	for i, a := range r.Cmd {
		if strings.IndexByte(a, 0) >= 0 {
			return invalid("cmd[%d] contains a NUL byte", i)
		}
	}
	for _, f := range []struct{ name, v string }{{"shell", r.Shell}, {"cwd", r.Cwd}, {"user", r.User}} {
		if strings.IndexByte(f.v, 0) >= 0 {
			return invalid("%s contains a NUL byte", f.name)
		}
	}
	if err := r.ValidateTerm(); err != nil {
		return err
	}
	return validateEnv("env", r.Env)
}

// Validate checks that a create request is well formed: one invalid_argument
// per mistake, naming the field. Zero means "the default" everywhere. It runs
// before any interceptor counts the request against a quota (a negative size
// would lower a project's usage); the node then checks what it can run (the
// smallest memory and disk, its backends and images).
func (r CreateSandboxRequest) Validate() error {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"memory_bytes", r.MemoryBytes}, {"disk_bytes", r.DiskBytes}, {"pids_max", r.PidsMax},
		{"ttl_seconds", r.TTLSeconds}, {"idle_timeout_seconds", r.IdleTimeoutSeconds},
	} {
		if f.v < 0 {
			return invalid("%s is negative (%d)", f.name, f.v)
		}
	}
	switch {
	case r.TTLSeconds > MaxTimeoutSeconds:
		return invalid("ttl_seconds is more than %d (a year)", MaxTimeoutSeconds)
	case !validExpiry(r.OnExpiry):
		return invalid("on_expiry must be %q, %q or %q, got %q", ExpiryDelete, ExpiryPause, ExpiryPauseFilesystem, r.OnExpiry)
	case !(r.CPU >= 0 && r.CPU <= MaxCPU): // NaN too
		return invalid("cpu must be between 0 and %d cores, got %g", MaxCPU, r.CPU)
	case len(r.RequestID) > MaxRequestIDLen:
		return invalid("request_id is longer than %d bytes", MaxRequestIDLen)
	}
	if err := r.validateStart(); err != nil {
		return err
	}
	if err := ValidateRegistryAuth("registry_auth", r.RegistryAuth); err != nil {
		return err
	}
	return validateEnv("env", r.Env)
}

// ValidateRegistryAuth refuses credentials with an empty or malformed
// registry host (HOST[:PORT]), user name or password, naming field.
func ValidateRegistryAuth(field string, auth map[string]RegistryAuth) error {
	for host, a := range auth {
		switch {
		case host == "" || strings.ContainsAny(host, "/@ \t\n") || strings.Contains(host, "://"):
			return invalid("%s: %q is not a registry host (HOST[:PORT])", field, host)
		case a.Username == "":
			return invalid("%s[%q]: username is empty", field, host)
		case a.Password == "":
			return invalid("%s[%q]: password is empty", field, host)
		}
	}
	return nil
}

// validateStart checks the start command and its readiness check.
func (r CreateSandboxRequest) validateStart() error {
	for _, f := range []struct{ name, v string }{{"start_cmd", r.StartCmd}, {"ready_cmd", r.ReadyCmd}} {
		if strings.IndexByte(f.v, 0) >= 0 {
			return invalid("%s contains a NUL byte", f.name)
		}
		if f.v != "" && strings.TrimSpace(f.v) == "" {
			return invalid("%s is blank", f.name)
		}
	}
	start := r.StartCmd != "" || r.Entrypoint
	switch {
	case r.StartCmd != "" && r.Entrypoint:
		return invalid("start_cmd and entrypoint are mutually exclusive")
	case r.ReadyPort < 0 || r.ReadyPort > 65535:
		return invalid("ready_port must be between 1 and 65535, got %d", r.ReadyPort)
	case r.ReadyTimeoutMs < 0 || r.ReadyTimeoutMs > MaxReadyTimeoutMs:
		return invalid("ready_timeout_ms must be between 1 and %d, got %d", MaxReadyTimeoutMs, r.ReadyTimeoutMs)
	case (r.ReadyCmd != "" || r.ReadyPort != 0) && !start:
		return invalid("ready_cmd and ready_port check a start command: set start_cmd or entrypoint")
	case r.ReadyTimeoutMs != 0 && r.ReadyCmd == "" && r.ReadyPort == 0:
		return invalid("ready_timeout_ms needs a readiness check (ready_cmd or ready_port)")
	}
	return nil
}

// ReadyTimeout is how long a create waits for its start command to be ready.
func (r CreateSandboxRequest) ReadyTimeout() time.Duration {
	if r.ReadyTimeoutMs == 0 {
		return DefaultReadyTimeoutMs * time.Millisecond
	}
	return time.Duration(r.ReadyTimeoutMs) * time.Millisecond
}

// Validate checks a batch: its size, each request (CreateSandboxRequest.Validate,
// the message prefixed with its index) and that no request_id repeats.
func (b BatchCreateRequest) Validate() error {
	if len(b.Sandboxes) == 0 || len(b.Sandboxes) > MaxBatch {
		return invalid("a batch holds 1..%d sandboxes, not %d", MaxBatch, len(b.Sandboxes))
	}
	seen := make(map[string]int, len(b.Sandboxes))
	for i, r := range b.Sandboxes {
		if err := r.Validate(); err != nil {
			msg := err.Error()
			if e := (*Error)(nil); errors.As(err, &e) {
				msg = e.Message
			}
			return invalid("sandboxes[%d]: %s", i, msg)
		}
		if id := r.RequestID; id != "" {
			if j, dup := seen[id]; dup {
				return invalid("sandboxes[%d] and sandboxes[%d] share request_id %q", j, i, id)
			}
			seen[id] = i
		}
	}
	return nil
}

func validExpiry(s string) bool {
	return s == "" || s == ExpiryDelete || s == ExpiryPause || s == ExpiryPauseFilesystem
}

// validateEnv rejects names and values an environment cannot hold.
func validateEnv(field string, env map[string]string) error {
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return invalid("%s: invalid variable name %q", field, k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return invalid("%s: value of %q contains a NUL byte", field, k)
		}
	}
	return nil
}

// Validate checks a follow request: negative offsets, a wait or a size out of
// range are invalid_argument.
func (r FollowRequest) Validate() error {
	switch {
	case r.StdoutOffset < 0 || r.StderrOffset < 0:
		return invalid("stdout_offset and stderr_offset must not be negative")
	case r.WaitMs < 0 || r.WaitMs > MaxFollowWaitMs:
		return invalid("wait_ms must be between 0 and %d, got %d", MaxFollowWaitMs, r.WaitMs)
	case r.MaxBytes < 0 || r.MaxBytes > MaxFollowBytes:
		return invalid("max_bytes must be between 0 and %d, got %d", MaxFollowBytes, r.MaxBytes)
	}
	return nil
}
