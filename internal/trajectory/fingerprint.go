package trajectory

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"path"
	"strings"

	"github.com/dsec-dev/dsec/pkg/api"
)

// Defaults the server applies, folded into fingerprints so that a request that
// spells a default out and one that leaves it empty are the same step.
const (
	DefaultExecTimeoutMs  = 60_000
	DefaultMaxOutputBytes = 1 << 20
)

// ExecArgs are the normalised arguments of exec, exec_stream and start_process.
type ExecArgs struct {
	Cmd            []string          `json:"cmd,omitempty"`
	Shell          string            `json:"shell,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	Cwd            string            `json:"cwd,omitempty"`
	User           string            `json:"user"`
	StdinSHA256    string            `json:"stdin_sha256,omitempty"`
	StdinSize      int               `json:"stdin_size,omitempty"`
	TimeoutMs      int64             `json:"timeout_ms"`
	MaxOutputBytes int64             `json:"max_output_bytes"`
	OutputEncoding string            `json:"output_encoding"`
}

// NormalizeExec applies the server's defaults to req and replaces its stdin by a
// hash. op decides the timeout default (only blocking exec has one).
func NormalizeExec(op string, req api.ExecRequest) ExecArgs {
	a := ExecArgs{Cmd: req.Cmd, Shell: req.Shell, Cwd: req.Cwd, User: req.User,
		TimeoutMs: req.TimeoutMs, MaxOutputBytes: req.MaxOutputBytes, OutputEncoding: req.OutputEncoding}
	if len(req.Env) > 0 {
		a.Env = req.Env
	}
	if a.User == "" {
		a.User = "root"
	}
	if a.Cwd != "" {
		a.Cwd = cleanPath(a.Cwd)
	}
	if a.TimeoutMs == 0 && op == OpExec {
		a.TimeoutMs = DefaultExecTimeoutMs
	}
	if a.MaxOutputBytes == 0 {
		a.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if a.OutputEncoding == "" {
		a.OutputEncoding = "utf8"
	}
	stdin := []byte(req.Stdin)
	if req.StdinBase64 != "" {
		if b, err := base64.StdEncoding.DecodeString(req.StdinBase64); err == nil {
			stdin = b
		} else {
			stdin = []byte("invalid base64:" + req.StdinBase64)
		}
	}
	if len(stdin) > 0 {
		a.StdinSHA256, a.StdinSize = SHA256(stdin), len(stdin)
	}
	return a
}

// FnCallArgs are the normalised arguments of a FnCall: the request with file
// contents and test data replaced by their sha256 (the whole request is the step's
// input).
type FnCallArgs struct {
	Language string            `json:"language,omitempty"`
	Cmd      []string          `json:"cmd,omitempty"`
	Files    map[string]string `json:"files_sha256,omitempty"`
	Tests    []FnCallTestArgs  `json:"tests"`
	Limits   api.FnCallLimits  `json:"limits"`
	Env      map[string]string `json:"env,omitempty"`
	Image    string            `json:"image,omitempty"`
	Device   string            `json:"device,omitempty"`
}

// FnCallTestArgs is one normalised test.
type FnCallTestArgs struct {
	StdinSHA256    string             `json:"stdin_sha256"`
	ExpectedSHA256 *string            `json:"expected_sha256,omitempty"`
	Compare        *api.FnCallCompare `json:"compare,omitempty"`
}

// NormalizeFnCall returns a FnCall's normalised arguments.
func NormalizeFnCall(req api.FnCallRequest) FnCallArgs {
	a := FnCallArgs{Language: req.Language, Cmd: req.Cmd, Limits: req.Limits, Env: req.Env, Image: req.Image,
		Device: req.Device, Tests: make([]FnCallTestArgs, len(req.Tests))}
	if len(req.Files) > 0 {
		a.Files = make(map[string]string, len(req.Files))
		for p, c := range req.Files {
			a.Files[p] = SHA256([]byte(c))
		}
	}
	for i, t := range req.Tests {
		a.Tests[i] = FnCallTestArgs{StdinSHA256: SHA256([]byte(t.Stdin)), Compare: t.Compare}
		if t.ExpectedOutput != nil {
			h := SHA256([]byte(*t.ExpectedOutput))
			a.Tests[i].ExpectedSHA256 = &h
		}
	}
	return a
}

// FileArgs are the normalised arguments of the file operations.
type FileArgs struct {
	Path          string `json:"path"`
	Mode          uint32 `json:"mode,omitempty"`
	Parents       bool   `json:"parents,omitempty"`
	Recursive     bool   `json:"recursive,omitempty"`
	ContentSHA256 string `json:"content_sha256,omitempty"`
	ContentSize   int64  `json:"content_size,omitempty"`
}

// HTTPArgs are the normalised arguments of a proxied HTTP request. Only the
// content type of the request headers counts.
type HTTPArgs struct {
	Method      string `json:"method"`
	Port        int    `json:"port"`
	Path        string `json:"path"` // escaped path and query
	ContentType string `json:"content_type,omitempty"`
	BodySHA256  string `json:"body_sha256"`
	BodySize    int64  `json:"body_size"`
}

// cleanPath normalises a sandbox path the way resolution treats it.
func cleanPath(p string) string {
	if p == "" {
		return p
	}
	c := path.Clean(p)
	if !strings.HasPrefix(c, "/") && strings.HasPrefix(p, "/") {
		c = "/" + c
	}
	return c
}

// CleanPath is cleanPath for callers building FileArgs.
func CleanPath(p string) string { return cleanPath(p) }

// Fingerprint returns "sha256:HEX" over the operation and the JSON of its
// normalised arguments (struct fields in a fixed order, map keys sorted), and
// that JSON.
func Fingerprint(op string, args any) (string, json.RawMessage, error) {
	b, err := json.Marshal(args)
	if err != nil {
		return "", nil, err
	}
	h := sha256.New()
	h.Write([]byte(op))
	h.Write([]byte{0})
	h.Write(b)
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), b, nil
}

// SHA256 returns the hex sha256 of b.
func SHA256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
