package qmp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"testing"
	"time"
)

// FuzzExecuteReply: whatever QEMU (or a guest that took it over) sends back,
// Execute returns instead of hanging or panicking once the socket closes, and
// what it returns is in the reply: the "return" value as sent (valid JSON), or
// the error's class and description. A reply after events is the one returned.
func FuzzExecuteReply(f *testing.F) {
	f.Add([]byte(`{"return": {"status": "running", "running": true}}` + "\n"))
	f.Add([]byte(`{"event": "STOP", "timestamp": {}}` + "\n" + `{"return": {}}` + "\n"))
	f.Add([]byte(`{"error": {"class": "GenericError", "desc": "nope"}}` + "\n"))
	f.Add([]byte(`{"return": [1, 2, {"a": null}]}` + "\n" + `{"return": 2}` + "\n"))
	f.Add([]byte(`{"event": "SHUTDOWN"}` + "\n" + `{"return"`))
	f.Add([]byte("\n\n{}\n"))
	f.Add([]byte(`{"error": null, "return": 5}` + "\n"))
	f.Fuzz(func(t *testing.T, replies []byte) {
		client, server := net.Pipe()
		defer client.Close()
		go func() {
			defer server.Close()
			// The command, then the replies, then the socket closes.
			if _, err := bufio.NewReader(server).ReadBytes('\n'); err != nil {
				return
			}
			server.Write(replies)
		}()
		c := &Conn{c: client, r: bufio.NewReaderSize(client, 64<<10)}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ret, err := c.Execute(ctx, "query-status", nil)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("Execute waited for its deadline on a closed socket: %v", err)
		}
		var qe *Error
		switch {
		case errors.As(err, &qe):
			if !bytes.Contains(replies, []byte(`"error"`)) {
				t.Fatalf("a QMP error %v from replies with no error: %q", qe, replies)
			}
		case err == nil:
			if ret != nil && !json.Valid(ret) {
				t.Fatalf("return value %q is not JSON", ret)
			}
			if ret != nil && !bytes.Contains(replies, ret) {
				t.Fatalf("return value %q is not in the replies %q", ret, replies)
			}
		}
		// Round trip: the same value sent after events comes back as sent.
		if err == nil && ret != nil {
			again := append([]byte(`{"event": "RESUME", "data": {}}`+"\n"+`{"return": `), ret...)
			got := roundTrip(t, append(again, "}\n"...))
			if !bytes.Equal(got, ret) {
				t.Fatalf("return %q came back as %q", ret, got)
			}
		}
	})
}

func roundTrip(t *testing.T, replies []byte) json.RawMessage {
	client, server := net.Pipe()
	defer client.Close()
	go func() {
		defer server.Close()
		if _, err := bufio.NewReader(server).ReadBytes('\n'); err == nil {
			server.Write(replies)
		}
	}()
	c := &Conn{c: client, r: bufio.NewReaderSize(client, 64<<10)}
	ret, err := c.Execute(context.Background(), "query-status", nil)
	if err != nil {
		t.Fatalf("replies %q: %v", replies, err)
	}
	return ret
}
