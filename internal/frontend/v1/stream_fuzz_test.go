package v1

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// FuzzStreamInput feeds arbitrary exec/stream input lines to the input reader:
// it never panics, every control message it passes on is valid for the exec,
// every refusal and error is the client's (invalid_argument or
// payload_too_large), and stdin always ends.
func FuzzStreamInput(f *testing.F) {
	for _, s := range []string{
		`{"stdin":"aGk="}` + "\n" + `{"eof":true}`,
		`{"signal":"TERM"}`, `{"signal":"NOPE"}`, `{"signal":"0"}`,
		`{"resize":{"cols":80,"rows":24}}`, `{"resize":{"cols":0,"rows":24}}`, `{"resize":{"cols":5000,"rows":1}}`,
		`{"resize":null}`, `{"resize":{}}`, `{"signal":"INT","resize":{"cols":1,"rows":1}}`,
		`{"x":1}`, `[`, "\n\n", `{"stdin":"!!"}`,
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, tty bool) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stdin := newChunkReader(ctx)
		control := make(chan session.Control)
		clientErr := func(err error) {
			if c := errdefs.CodeOf(err); c != api.CodeInvalidArgument && c != api.CodePayloadTooLarge {
				t.Errorf("error %v has code %s", err, c)
			}
		}
		done := make(chan error, 1)
		go func() {
			done <- readInput(ctx, newLineReader(bytes.NewReader(body), 1<<10), stdin, control, tty, clientErr)
			close(control)
		}()
		var passed []session.Control
		controlsDone := make(chan struct{})
		go func() {
			defer close(controlsDone)
			for c := range control {
				passed = append(passed, c)
			}
		}()
		if _, err := io.Copy(io.Discard, stdin); err != nil {
			t.Fatalf("stdin: %v", err)
		}
		if err := <-done; err != nil {
			clientErr(err)
		}
		<-controlsDone
		for _, c := range passed {
			if err := session.CheckControl(c, tty); err != nil {
				t.Fatalf("passed on %+v: %v", c, err)
			}
		}
	})
}
