package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// errEmptyBody is returned by decodeJSON for a body without any JSON value.
var errEmptyBody = errdefs.Invalid("request body is empty; expected a JSON object")

// decodeJSON decodes exactly one JSON value from r into v: unknown fields, trailing
// data and bodies over limit bytes are errors (invalid_argument, payload_too_large)
// whose message names the problem.
func decodeJSON(r io.Reader, limit int64, v any) error {
	lr := &limitedReader{r: r, n: limit}
	dec := json.NewDecoder(lr)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if lr.over {
			return tooLarge(limit)
		}
		return jsonError(err)
	}
	// Anything but whitespace after the value is trailing data.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if lr.over {
			return tooLarge(limit)
		}
		if err != nil && !isSyntaxError(err) {
			return errdefs.Invalid("reading request body: %v", err)
		}
		return errdefs.Invalid("unexpected data after the JSON object")
	}
	return nil
}

// decodeLine decodes one NDJSON line (no size check: the line reader did it).
func decodeLine(line []byte, v any) error {
	return decodeJSON(bytes.NewReader(line), int64(len(line))+1, v)
}

func isSyntaxError(err error) bool {
	var se *json.SyntaxError
	return errors.As(err, &se)
}

func tooLarge(limit int64) error {
	return errdefs.New(api.CodePayloadTooLarge, "JSON body exceeds the limit of %d bytes", limit)
}

// jsonError turns an encoding/json error into an invalid_argument error that names
// the problem (offset, field, expected type).
func jsonError(err error) error {
	var (
		se  *json.SyntaxError
		te  *json.UnmarshalTypeError
		mbe *http.MaxBytesError
	)
	switch {
	case errors.Is(err, io.EOF):
		return errEmptyBody
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errdefs.Invalid("malformed JSON: unexpected end of input")
	case errors.As(err, &mbe):
		return errdefs.New(api.CodePayloadTooLarge, "request body exceeds the limit of %d bytes", mbe.Limit)
	case errors.As(err, &se):
		return errdefs.Invalid("malformed JSON at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return errdefs.Invalid("wrong JSON type: expected %s, got %s", te.Type, te.Value)
		}
		return errdefs.Invalid("field %q: expected %s, got JSON %s", field, te.Type, te.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return errdefs.Invalid("unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	default:
		return errdefs.Invalid("malformed JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
}

// limitedReader reads at most n bytes and records whether the source held more.
type limitedReader struct {
	r    io.Reader
	n    int64
	over bool
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		// Probe one byte to tell "exactly at the limit" from "over it".
		var b [1]byte
		n, err := l.r.Read(b[:])
		if n > 0 {
			l.over = true
			return 0, errors.New("body over the limit")
		}
		return 0, err
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// decodeExecRequest decodes and validates an ExecRequest body.
func decodeExecRequest(r io.Reader, limit int64) (api.ExecRequest, error) {
	var req api.ExecRequest
	if err := decodeJSON(r, limit, &req); err != nil {
		return api.ExecRequest{}, err
	}
	if err := validateExecRequest(&req); err != nil {
		return api.ExecRequest{}, err
	}
	return req, nil
}

// validateExecRequest checks what the HTTP layer can check without the sandbox.
func validateExecRequest(req *api.ExecRequest) error {
	switch {
	case len(req.Cmd) == 0 && req.Shell == "":
		return errdefs.Invalid("exactly one of cmd and shell is required; neither is set")
	case len(req.Cmd) > 0 && req.Shell != "":
		return errdefs.Invalid("exactly one of cmd and shell is allowed; both are set")
	case len(req.Cmd) > 0 && req.Cmd[0] == "":
		return errdefs.Invalid("cmd[0] (the program) is empty")
	case req.TimeoutMs < 0:
		return errdefs.Invalid("timeout_ms is negative (%d)", req.TimeoutMs)
	case req.MaxOutputBytes < 0:
		return errdefs.Invalid("max_output_bytes is negative (%d)", req.MaxOutputBytes)
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
	for name, v := range map[string]string{"shell": req.Shell, "cwd": req.Cwd, "user": req.User} {
		if strings.IndexByte(v, 0) >= 0 {
			return errdefs.Invalid("%s contains a NUL byte", name)
		}
	}
	if _, err := session.TermSizeOf(*req); err != nil {
		return err
	}
	return validateEnv("env", req.Env)
}

// validateEnv rejects names an environment cannot hold.
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

// validateCreate checks a create request's numbers and names.
func validateCreate(req *api.CreateSandboxRequest) error {
	for name, v := range map[string]int64{
		"memory_bytes": req.MemoryBytes, "disk_bytes": req.DiskBytes, "pids_max": req.PidsMax,
		"ttl_seconds": req.TTLSeconds, "idle_timeout_seconds": req.IdleTimeoutSeconds,
	} {
		if v < 0 {
			return errdefs.Invalid("%s is negative (%d)", name, v)
		}
	}
	if req.CPU < 0 {
		return errdefs.Invalid("cpu is negative (%g)", req.CPU)
	}
	return validateEnv("env", req.Env)
}

// decodeBody decodes a JSON request body under the server's limit.
func (s *Server) decodeBody(r *http.Request, v any) error {
	if r.ContentLength > s.opts.MaxBodyBytes {
		return tooLarge(s.opts.MaxBodyBytes)
	}
	if err := decodeJSON(r.Body, s.opts.MaxBodyBytes, v); err != nil {
		return fmt.Errorf("decoding %s body: %w", r.URL.Path, err)
	}
	return nil
}
