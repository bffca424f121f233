package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/dsec-dev/dsec/internal/frontend/dashboard"
	sessionpkg "github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// FuzzTerminalMessages: the dashboard terminal's WebSocket messages. Whatever
// first message and whatever text and binary frames a browser sends, the
// server never panics and closes with a documented code; only the right token
// starts a shell; keystrokes reach it in order and unaltered; every text frame
// that is not a valid resize gets an input_error, and the resizes the shell
// gets are the valid ones, in order.
func FuzzTerminalMessages(f *testing.F) {
	frames := func(fs ...string) []byte { // "t:" text, "b:" binary
		var b []byte
		for _, s := range fs {
			kind := byte(0)
			if strings.HasPrefix(s, "b:") {
				kind = 1
			}
			b = append(b, kind, byte(len(s)-2))
			b = append(b, s[2:]...)
		}
		return b
	}
	good := []byte(`{"token": "` + token + `", "cols": 80, "rows": 24}`)
	f.Add(good, frames(`t:{"resize": {"cols": 100, "rows": 30}}`, "b:hello"))
	f.Add(good, frames(`t:{"resize": {"cols": 0, "rows": 30}}`, "t:nope", "b:line\nmore"))
	f.Add(good, frames(`t:{"resize": null}`, `t:{"resize": {"cols": 99999999999, "rows": -1}}`, "b:"))
	f.Add([]byte(`{"token": "wrong", "cols": 80, "rows": 24}`), frames("b:x"))
	f.Add([]byte(`{"token": "`+token+`", "cols": 0}`), frames())
	f.Add([]byte(`[]`), frames("t:{}"))
	f.Fuzz(func(t *testing.T, hello, stream []byte) {
		// The shell puts its (real) terminal in raw mode without echo, says so,
		// and copies what it gets to its output: the output is then exactly the
		// keys that reached it.
		const ready = "READY"
		e := newEnv(t, "stty raw -echo && printf "+ready+" && exec cat")
		sb := e.sandbox(nil)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.srv.URL, "http")+"/ui/api/terminal/"+sb.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		var out bytes.Buffer
		var events []map[string]any
		var status websocket.StatusCode
		// readUntil reads until the output has n bytes or the server closes.
		readUntil := func(n int) {
			for status == 0 && out.Len() < n {
				typ, data, err := c.Read(ctx)
				if err != nil {
					var ce websocket.CloseError
					if !errors.As(err, &ce) {
						t.Fatalf("the terminal did not close: %v", err)
					}
					status = ce.Code
					return
				}
				if typ == websocket.MessageBinary {
					out.Write(data)
					continue
				}
				var ev map[string]any
				if err := json.Unmarshal(data, &ev); err != nil {
					t.Fatalf("event %q: %v", data, err)
				}
				events = append(events, ev)
			}
		}
		var keys []byte
		var valid []api.TermSize
		textFrames := 0
		_ = c.Write(ctx, websocket.MessageText, hello)
		readUntil(len(ready)) // the shell is ready, or the hello refused
		for status == 0 && len(stream) >= 2 {
			kind, n := stream[0], min(int(stream[1]), len(stream)-2)
			data := stream[2 : 2+n]
			stream = stream[2+n:]
			if kind&1 == 1 {
				keys = append(keys, data...)
				_ = c.Write(ctx, websocket.MessageBinary, data)
				continue
			}
			textFrames++
			var in struct {
				Resize *api.TermSize `json:"resize"`
			}
			if json.Unmarshal(data, &in) == nil && in.Resize != nil &&
				sessionpkg.CheckControl(sessionpkg.Control{Resize: in.Resize}, true) == nil {
				valid = append(valid, *in.Resize)
			}
			_ = c.Write(ctx, websocket.MessageText, data)
		}
		keys = append(keys, "END\n"...)
		_ = c.Write(ctx, websocket.MessageBinary, []byte("END\n"))
		readUntil(len(ready) + len(keys))
		count := func(typ string) int {
			n := 0
			for _, ev := range events {
				if ev["type"] == typ {
					n++
				}
			}
			return n
		}
		var h struct {
			Token *string `json:"token"`
		}
		authorized := json.Unmarshal(hello, &h) == nil && h.Token != nil && *h.Token == token
		switch status {
		case 0: // the shell (cat) echoed everything typed; the browser leaves
			if !authorized || count("started") != 1 {
				t.Fatalf("hello %q ran a shell (events %v)", hello, events)
			}
			if got, want := out.Bytes(), append([]byte(ready), keys...); !bytes.Equal(got, want) {
				t.Fatalf("the shell printed %q, want %q and the keys typed %q", got, ready, keys)
			}
			c.Close(websocket.StatusNormalClosure, "")
		case dashboard.CloseBadRequest, dashboard.CloseUnauthorized:
			if count("started") > 0 || out.Len() > 0 {
				t.Fatalf("refused with %d, yet a shell started (output %q)", status, out.String())
			}
			if status == dashboard.CloseUnauthorized && authorized {
				t.Fatalf("hello %q with the token refused as unauthorized", hello)
			}
		default:
			t.Fatalf("closed with %d, not a documented code", status)
		}
		if n := count("input_error"); n > textFrames-len(valid) {
			t.Fatalf("%d input errors for %d text frames of which %d valid", n, textFrames, len(valid))
		}
		got := e.node.Resizes()
		if len(got) > len(valid) {
			t.Fatalf("resizes %v, more than the valid ones sent %v", got, valid)
		}
		for i := range got {
			if got[i] != valid[i] {
				t.Fatalf("resizes %v, want (a prefix of) %v", got, valid)
			}
		}
	})
}
