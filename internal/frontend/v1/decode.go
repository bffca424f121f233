package v1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
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

// decodeExecRequest decodes an ExecRequest body. The session chain's
// validating interceptor (session.Validating) checks it, once, before anything
// answers or logs it.
func decodeExecRequest(r io.Reader, limit int64) (api.ExecRequest, error) {
	var req api.ExecRequest
	if err := decodeJSON(r, limit, &req); err != nil {
		return api.ExecRequest{}, err
	}
	return req, nil
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
