package v1_test

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	v1 "github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/pkg/api"
)

// A TTY stream's resizes reach the session service; refused ones (zero, huge)
// get an input_error event and the exec goes on undisturbed.
func TestExecStreamTTYResize(t *testing.T) {
	e := newEnv(t, v1.Options{})
	sc := e.stream(api.ExecRequest{Cmd: []string{"sleep", "60"}, TTY: true, Cols: 100, Rows: 30})
	if ev := sc.next(); ev.Type != "started" {
		t.Fatalf("first event %+v", ev)
	}
	sc.send(api.StreamInput{Resize: &api.TermSize{Cols: 120, Rows: 40}})
	for _, bad := range []api.TermSize{{Cols: 0, Rows: 10}, {Cols: 80, Rows: 0}, {Cols: 1001, Rows: 10}, {Cols: 80, Rows: 5000}, {Cols: -1, Rows: 5}} {
		sc.send(api.StreamInput{Resize: &bad})
		ev := sc.next()
		if ev.Type != "input_error" || ev.Error == nil || ev.Error.Code != api.CodeInvalidArgument ||
			api.StatusOf(ev.Error.Code) != http.StatusBadRequest || !strings.Contains(ev.Error.Message, "terminal size") {
			t.Fatalf("resize %v: event %+v", bad, ev)
		}
	}
	sc.send(api.StreamInput{Resize: &api.TermSize{Cols: 1000, Rows: 1}})
	sc.send(api.StreamInput{Signal: "TERM"})
	if ev := sc.next(); ev.Type != "exit" || ev.Result == nil || ev.Result.Signal != "SIGTERM" {
		t.Fatalf("exit event %+v", ev)
	}
	want := []api.TermSize{{Cols: 120, Rows: 40}, {Cols: 1000, Rows: 1}}
	if got := e.node.Resizes(); !reflect.DeepEqual(got, want) {
		t.Fatalf("resizes %v, want %v", got, want)
	}
}

// A resize of an exec without a terminal is refused; stdin and the exit are
// unaffected.
func TestExecStreamResizeWithoutTTY(t *testing.T) {
	e := newEnv(t, v1.Options{})
	sc := e.stream(api.ExecRequest{Cmd: []string{"cat"}})
	if ev := sc.next(); ev.Type != "started" {
		t.Fatalf("first event %+v", ev)
	}
	sc.send(api.StreamInput{Resize: &api.TermSize{Cols: 80, Rows: 24}})
	if ev := sc.next(); ev.Type != "input_error" || ev.Error == nil || ev.Error.Code != api.CodeInvalidArgument ||
		!strings.Contains(ev.Error.Message, "no terminal") {
		t.Fatalf("event %+v", ev)
	}
	sc.send(api.StreamInput{Stdin: []byte("still here"), EOF: true})
	if ev := sc.next(); ev.Type != "stdout" || string(ev.Data) != "still here" {
		t.Fatalf("event %+v", ev)
	}
	if ev := sc.next(); ev.Type != "exit" || ev.Result == nil || ev.Result.ExitCode != 0 {
		t.Fatalf("exit event %+v", ev)
	}
	if got := e.node.Resizes(); len(got) != 0 {
		t.Fatalf("resizes %v reached the service", got)
	}
}

// With tty the terminal's output is one stream: stderr arrives as stdout.
func TestExecStreamTTYOneStream(t *testing.T) {
	e := newEnv(t, v1.Options{})
	sb := e.create()
	resp, b := e.do("POST", "/v1/sandboxes/"+sb.ID+"/exec/stream", strings.NewReader(`{"shell":"echo hi >&2","tty":true}`+"\n"))
	// "hi\r\n": the terminal turns the newline into CR LF.
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"type":"stdout","data":"aGkNCg=="`) || strings.Contains(string(b), `"type":"stderr"`) {
		t.Fatalf("stream: %d %s", resp.StatusCode, b)
	}
}

// Bad terminal fields on the request line are a 400 before anything runs.
func TestExecStreamTTYBadRequest(t *testing.T) {
	e := newEnv(t, v1.Options{})
	sb := e.create()
	for _, body := range []string{
		`{"cmd":["cat"],"cols":80,"rows":24}`,              // size without tty
		`{"cmd":["cat"],"tty":true,"cols":1001,"rows":24}`, // huge
		`{"cmd":["cat"],"tty":true,"cols":80}`,             // one side only
		`{"cmd":["cat"],"tty":true,"cols":-5,"rows":-5}`,
	} {
		resp, b := e.do("POST", "/v1/sandboxes/"+sb.ID+"/exec/stream", strings.NewReader(body+"\n"))
		wantError(t, resp, b, http.StatusBadRequest, api.CodeInvalidArgument)
		resp, b = e.do("POST", "/v1/sandboxes/"+sb.ID+"/processes", strings.NewReader(body))
		wantError(t, resp, b, http.StatusBadRequest, api.CodeInvalidArgument)
	}
	if n := len(e.node.Resizes()); n != 0 {
		t.Fatalf("%d resizes", n)
	}
}
