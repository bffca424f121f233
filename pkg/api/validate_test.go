package api_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/pkg/api"
)

// isInvalid says err is one invalid_argument (HTTP 400) whose message names want.
func isInvalid(err error, want string) bool {
	var e *api.Error
	return errors.As(err, &e) && e.Code == api.CodeInvalidArgument && e.Status == 400 && strings.Contains(e.Message, want)
}

// TestExecRequestValidate: each mistake is refused with invalid_argument and a message
// that names the field; a good request passes.
func TestExecRequestValidate(t *testing.T) {
	ok := api.ExecRequest{Cmd: []string{"echo", "hi"}}
	for name, tc := range map[string]struct {
		req  func(r *api.ExecRequest)
		want string
	}{
		"neither":      {func(r *api.ExecRequest) { r.Cmd = nil }, "exactly one of cmd and shell is required"},
		"both":         {func(r *api.ExecRequest) { r.Shell = "true" }, "both are set"},
		"empty cmd[0]": {func(r *api.ExecRequest) { r.Cmd = []string{""} }, "cmd[0]"},
		"NUL in cmd":   {func(r *api.ExecRequest) { r.Cmd = []string{"a", "b\x00"} }, "cmd[1] contains a NUL byte"},
		"NUL in cwd":   {func(r *api.ExecRequest) { r.Cwd = "/\x00" }, "cwd contains a NUL byte"},
		"NUL in user":  {func(r *api.ExecRequest) { r.User = "a\x00" }, "user contains a NUL byte"},
		"timeout":      {func(r *api.ExecRequest) { r.TimeoutMs = -1 }, "timeout_ms is negative"},
		"output neg":   {func(r *api.ExecRequest) { r.MaxOutputBytes = -1 }, "max_output_bytes"},
		"output big":   {func(r *api.ExecRequest) { r.MaxOutputBytes = api.MaxOutputBytes + 1 }, "max_output_bytes"},
		"stdin both":   {func(r *api.ExecRequest) { r.Stdin, r.StdinBase64 = "a", "YQ==" }, "stdin and stdin_base64"},
		"stdin base64": {func(r *api.ExecRequest) { r.StdinBase64 = "!" }, "stdin_base64 is not valid base64"},
		"encoding":     {func(r *api.ExecRequest) { r.OutputEncoding = "hex" }, "output_encoding"},
		"size w/o tty": {func(r *api.ExecRequest) { r.Cols, r.Rows = 80, 24 }, "need tty"},
		"size":         {func(r *api.ExecRequest) { r.TTY, r.Cols, r.Rows = true, 0, 5 }, "terminal size"},
		"env name":     {func(r *api.ExecRequest) { r.Env = map[string]string{"A=B": "c"} }, "env: invalid variable name"},
		"env value":    {func(r *api.ExecRequest) { r.Env = map[string]string{"A": "\x00"} }, `env: value of "A"`},
	} {
		req := ok
		tc.req(&req)
		err := req.Validate()
		if !isInvalid(err, tc.want) {
			t.Errorf("%s: %v, want invalid_argument naming %q", name, err, tc.want)
		}
	}
	for _, good := range []api.ExecRequest{ok, {Shell: "ls", TTY: true}, {Cmd: []string{"x"}, StdinBase64: "YQ==",
		OutputEncoding: "base64", MaxOutputBytes: api.MaxOutputBytes, Env: map[string]string{"A": "b"}}} {
		if err := good.Validate(); err != nil {
			t.Errorf("%+v refused: %v", good, err)
		}
	}
}

// TestCreateSandboxRequestValidate: each mistake is refused with invalid_argument and a
// message that names the field; zeros (the defaults) pass.
func TestCreateSandboxRequestValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		req  api.CreateSandboxRequest
		want string
	}{
		"memory neg": {api.CreateSandboxRequest{MemoryBytes: -5}, "memory_bytes is negative"},
		"disk neg":   {api.CreateSandboxRequest{DiskBytes: -1}, "disk_bytes is negative"},
		"pids neg":   {api.CreateSandboxRequest{PidsMax: -1}, "pids_max is negative"},
		"ttl neg":    {api.CreateSandboxRequest{TTLSeconds: -1}, "ttl_seconds is negative"},
		"idle neg":   {api.CreateSandboxRequest{IdleTimeoutSeconds: -1}, "idle_timeout_seconds is negative"},
		"ttl big":    {api.CreateSandboxRequest{TTLSeconds: api.MaxTimeoutSeconds + 1}, "ttl_seconds is more than"},
		"on_expiry":  {api.CreateSandboxRequest{OnExpiry: "explode"}, "on_expiry must be"},
		"cpu neg":    {api.CreateSandboxRequest{CPU: -0.5}, "cpu must be between"},
		"cpu big":    {api.CreateSandboxRequest{CPU: api.MaxCPU + 1}, "cpu must be between"},
		"cpu NaN":    {api.CreateSandboxRequest{CPU: math.NaN()}, "cpu must be between"},
		"request_id": {api.CreateSandboxRequest{RequestID: strings.Repeat("r", api.MaxRequestIDLen+1)}, "request_id"},
		"env":        {api.CreateSandboxRequest{Env: map[string]string{"": "x"}}, "env: invalid variable name"},
	} {
		err := tc.req.Validate()
		if !isInvalid(err, tc.want) {
			t.Errorf("%s: %v, want invalid_argument naming %q", name, err, tc.want)
		}
	}
	if err := (api.CreateSandboxRequest{}).Validate(); err != nil {
		t.Errorf("the defaults refused: %v", err)
	}
	if err := (api.CreateSandboxRequest{CPU: api.MaxCPU, MemoryBytes: 1, DiskBytes: 1,
		RequestID: strings.Repeat("r", api.MaxRequestIDLen)}).Validate(); err != nil {
		t.Errorf("the limits refused: %v", err)
	}
}

// TestBatchCreateRequestValidate: a batch's size, each member (named by its
// index) and repeated request IDs are refused; a good batch passes.
func TestBatchCreateRequestValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		reqs []api.CreateSandboxRequest
		want string
	}{
		"empty":     {nil, "a batch holds 1..100000 sandboxes, not 0"},
		"too big":   {make([]api.CreateSandboxRequest, api.MaxBatch+1), "not 100001"},
		"member":    {[]api.CreateSandboxRequest{{}, {PidsMax: -1}}, "sandboxes[1]: pids_max is negative (-1)"},
		"duplicate": {[]api.CreateSandboxRequest{{RequestID: "a"}, {}, {RequestID: "a"}}, `sandboxes[0] and sandboxes[2] share request_id "a"`},
	} {
		if err := (api.BatchCreateRequest{Sandboxes: tc.reqs}).Validate(); !isInvalid(err, tc.want) {
			t.Errorf("%s: %v, want invalid_argument naming %q", name, err, tc.want)
		}
	}
	if err := (api.BatchCreateRequest{Sandboxes: []api.CreateSandboxRequest{{RequestID: "a"}, {RequestID: "b"}, {}}}).Validate(); err != nil {
		t.Errorf("a good batch refused: %v", err)
	}
}

// TestCreateStartValidate: a malformed start command or readiness check is
// refused with invalid_argument naming its field; good ones pass.
func TestCreateStartValidate(t *testing.T) {
	type req = api.CreateSandboxRequest
	for name, tc := range map[string]struct {
		req  req
		want string
	}{
		"blank start":      {req{StartCmd: "  \t"}, "start_cmd is blank"},
		"NUL start":        {req{StartCmd: "a\x00"}, "start_cmd contains a NUL byte"},
		"blank ready":      {req{StartCmd: "x", ReadyCmd: " "}, "ready_cmd is blank"},
		"NUL ready":        {req{StartCmd: "x", ReadyCmd: "\x00"}, "ready_cmd contains a NUL byte"},
		"both":             {req{StartCmd: "x", Entrypoint: true}, "start_cmd and entrypoint are mutually exclusive"},
		"port neg":         {req{StartCmd: "x", ReadyPort: -1}, "ready_port must be between 1 and 65535"},
		"port big":         {req{StartCmd: "x", ReadyPort: 65536}, "ready_port must be between 1 and 65535, got 65536"},
		"timeout neg":      {req{StartCmd: "x", ReadyPort: 80, ReadyTimeoutMs: -1}, "ready_timeout_ms must be between"},
		"timeout big":      {req{StartCmd: "x", ReadyPort: 80, ReadyTimeoutMs: api.MaxReadyTimeoutMs + 1}, "ready_timeout_ms must be between"},
		"ready w/o start":  {req{ReadyCmd: "true"}, "set start_cmd or entrypoint"},
		"port w/o start":   {req{ReadyPort: 80}, "set start_cmd or entrypoint"},
		"timeout w/o chk":  {req{StartCmd: "x", ReadyTimeoutMs: 10}, "ready_timeout_ms needs a readiness check"},
		"batch member bad": {req{Entrypoint: true, ReadyPort: 70000}, "ready_port"},
	} {
		if err := tc.req.Validate(); !isInvalid(err, tc.want) {
			t.Errorf("%s: %v, want invalid_argument naming %q", name, err, tc.want)
		}
	}
	if err := (api.BatchCreateRequest{Sandboxes: []req{{}, {StartCmd: "x", ReadyPort: 0x10000}}}).Validate(); !isInvalid(err, "sandboxes[1]: ready_port") {
		t.Errorf("batch: %v", err)
	}
	for _, good := range []req{{StartCmd: "sleep 1"}, {Entrypoint: true}, {StartCmd: "x", ReadyCmd: "true", ReadyPort: 65535,
		ReadyTimeoutMs: api.MaxReadyTimeoutMs}, {Entrypoint: true, ReadyPort: 1, ReadyTimeoutMs: 1}} {
		if err := good.Validate(); err != nil {
			t.Errorf("%+v refused: %v", good, err)
		}
	}
}
