package v1

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

func TestDecodeJSONLimit(t *testing.T) {
	var req api.ExecRequest
	body := `{"shell":"true"}`
	if err := decodeJSON(strings.NewReader(body), int64(len(body)), &req); err != nil {
		t.Fatalf("exactly at the limit: %v", err)
	}
	if err := decodeJSON(strings.NewReader(body+" "), int64(len(body)), &req); !errdefs.Is(err, api.CodePayloadTooLarge) {
		t.Fatalf("one over the limit: %v", err)
	}
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]int{"SIGTERM": 15, "term": 15, "15": 15, "KILL": 9, "SIGRTMIN": 0, "0": 0, "65": 0, "": 9,
		"hup": 1, "SIGWINCH": 28, "iot": 6, "SIGPOLL": 29, "sigsigterm": 0, "SIG": 0, "-1": 0, "64": 64, "SIGXYZ": 0} {
		got, err := parseSignal(in, 9)
		if (want == 0) != (err != nil) || got != want {
			t.Errorf("parseSignal(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}

func FuzzDecodeExecRequest(f *testing.F) {
	for _, s := range []string{
		`{"cmd":["echo","hi"]}`, `{"shell":"ls -l","timeout_ms":5}`, `{"cmd":["x"],"stdin_base64":"aGk="}`,
		`{"cmd":[]}`, `{"cmd":["a"],"shell":"b"}`, `{"cmd":"x"}`, `{} {}`, `{"env":{"A":"b"},"cmd":["a"]}`,
		`{"cmd":["a"],"output_encoding":"base64","max_output_bytes":-1}`, `[`, ``, "\x00",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := decodeExecRequest(strings.NewReader(string(b)), 1<<10)
		if err == nil {
			err = req.Validate() // as the session chain does (session.Validating)
		}
		if err != nil {
			code := errdefs.CodeOf(err)
			if code != api.CodeInvalidArgument && code != api.CodePayloadTooLarge {
				t.Fatalf("error %v has code %s", err, code)
			}
			return
		}
		// Whatever decodes must satisfy the invariants and survive a round trip.
		if (len(req.Cmd) > 0) == (req.Shell != "") || req.TimeoutMs < 0 || req.MaxOutputBytes < 0 {
			t.Fatalf("invalid request accepted: %+v", req)
		}
		out, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeExecRequest(strings.NewReader(string(out)), int64(len(out))+1)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", out, err)
		}
		if again.Shell != req.Shell || len(again.Cmd) != len(req.Cmd) {
			t.Fatalf("round trip changed %+v to %+v", req, again)
		}
	})
}
