package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/pkg/api"
)

// FuzzReadEvents: whatever an exec stream's answer holds, the event reader ends
// with the result of an exit event or an error (never a panic, never waiting
// past the end of the input), and output reaches the writers only from
// stdout/stderr events.
func FuzzReadEvents(f *testing.F) {
	for _, s := range []string{
		`{"type":"started","pid":3}` + "\n" + `{"type":"stdout","data":"aGk="}` + "\n" + `{"type":"exit","result":{"exit_code":0}}` + "\n",
		`{"type":"stderr","data":"eA=="}` + "\n" + `{"type":"exit"}`,
		`{"type":"error","error":{"code":"internal","message":"x"}}`,
		`{"type":"error"}`, `{"type":"input_error","error":{"code":"invalid_argument","message":"bad"}}`,
		`{"type":"stdout","data":"!!"}`, `{"type":"exit","result":{"exit_code":1}} trailing`,
		`{"type":"x"}{"type":"exit","result":{}}`, `[`, ``, "\x00", strings.Repeat(`{"type":"stdout","data":"QQ=="}`, 50),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var out, errb bytes.Buffer
		inputErrors := 0
		var exitErr *api.Error
		res, err := readEvents(json.NewDecoder(bytes.NewReader(b)), StreamOptions{Stdout: &out, Stderr: &errb,
			OnInputError: func(e *api.Error) {
				if e == nil || e.Status != 400 {
					t.Fatalf("input error %+v", e)
				}
				inputErrors++
			}}, &exitErr)
		if exitErr != nil && err != nil {
			t.Fatalf("an exit event's error %v with the stream's %v", exitErr, err)
		}
		if err == nil {
			if !bytes.Contains(b, []byte("exit")) {
				t.Fatalf("a result %+v without an exit event in %q", res, b)
			}
		} else if _, ok := api.AsError(err); !ok && !errors.Is(err, io.ErrUnexpectedEOF) && !strings.Contains(err.Error(), "exit event without a result") {
			t.Fatalf("unclassified error %v", err)
		}
		if out.Len()+errb.Len() > len(b) {
			t.Fatalf("%d bytes of output from %d bytes of events", out.Len()+errb.Len(), len(b))
		}
	})
}
