package e2e

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// ptyExec starts a terminal exec whose output goes to a screen; it is closed
// when the test ends.
func (n *node) ptyExec(t *testing.T, id string, req api.ExecRequest) (*client.Stream, *screen) {
	t.Helper()
	req.TTY = true
	if req.TimeoutMs == 0 {
		req.TimeoutMs = 120_000 // a stuck test ends
	}
	scr := &screen{}
	s, err := n.cl.StartExecStream(context.Background(), id, req, client.StreamOptions{Stdout: scr, Stderr: scr})
	if err != nil {
		t.Fatalf("tty exec %v: %v", req.Cmd, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, scr
}

func typeKeys(t *testing.T, s *client.Stream, keys string) {
	t.Helper()
	if _, err := s.Write([]byte(keys)); err != nil {
		t.Fatalf("typing %q: %v", keys, err)
	}
}

// TestPTYTerminal: the program sees a terminal of the size asked for (and the
// default size without one), stderr shares it, and the exit code is as usual.
func TestPTYTerminal(t *testing.T) {
	n := startNode(t)
	id := n.create(t, api.CreateSandboxRequest{})
	s, scr := n.ptyExec(t, id, api.ExecRequest{Shell: "tty; stty size; echo to-stderr >&2; test -t 0 && test -t 2 && exit 5", Cols: 100, Rows: 30})
	res, err := s.Wait()
	if err != nil || res.ExitCode != 5 {
		t.Fatalf("result %+v %v; screen %q", res, err, scr.all())
	}
	scr.expect(t, `^/dev/pts/\d+\r\n30 100\r\nto-stderr\r\n$`)

	s, scr = n.ptyExec(t, id, api.ExecRequest{Cmd: []string{"stty", "size"}})
	if res, err := s.Wait(); err != nil || res.ExitCode != 0 {
		t.Fatalf("default size: %+v %v", res, err)
	}
	scr.expect(t, `^24 80\r\n$`)
}

// TestPTYInteractive: resizes arrive as SIGWINCH, Ctrl-C (the byte 0x03)
// interrupts the foreground job and not the shell, and an interactive program's
// prompts and answers come through.
func TestPTYInteractive(t *testing.T) {
	n := startNode(t)
	id := n.create(t, api.CreateSandboxRequest{})

	t.Run("resize is SIGWINCH", func(t *testing.T) {
		s, scr := n.ptyExec(t, id, api.ExecRequest{Shell: `trap 'echo winch $(stty size)' WINCH; echo ready; while :; do sleep 0.05; done`})
		scr.expect(t, `ready\r\n`)
		for _, sz := range []api.TermSize{{Cols: 132, Rows: 43}, {Cols: 20, Rows: 5}} {
			if err := s.Resize(sz.Cols, sz.Rows); err != nil {
				t.Fatal(err)
			}
			scr.expect(t, fmt.Sprintf(`winch %d %d\r\n`, sz.Rows, sz.Cols))
		}
		typeKeys(t, s, "\x03") // the script is the foreground job: it ends
		res, err := s.Wait()
		if err != nil || (res.Signal != "SIGINT" && res.ExitCode != 130) {
			t.Fatalf("after Ctrl-C: %+v %v", res, err)
		}
	})

	t.Run("Ctrl-C interrupts the job, not the shell", func(t *testing.T) {
		s, scr := n.ptyExec(t, id, api.ExecRequest{Cmd: []string{"sh", "-i"}, Env: map[string]string{"PS1": "$ "}})
		scr.expect(t, `\$ $`)
		typeKeys(t, s, "sleep 100\r")
		scr.expect(t, `sleep 100\r\n`) // echoed: the shell runs it
		waitSandboxProc(t, id, true, "sleep", "100")
		start := time.Now()
		typeKeys(t, s, "\x03")
		scr.expect(t, `\$ $`)
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("sleep ended only after %v", d)
		}
		waitSandboxProc(t, id, false, "sleep", "100")
		typeKeys(t, s, "echo alive $((6*7))\r")
		scr.expect(t, `alive 42\r\n\$ $`)
		typeKeys(t, s, "exit 3\r")
		if res, err := s.Wait(); err != nil || res.ExitCode != 3 {
			t.Fatalf("shell exit: %+v %v", res, err)
		}
	})

	t.Run("python3 -i", func(t *testing.T) {
		s, scr := n.ptyExec(t, id, api.ExecRequest{Cmd: []string{"python3", "-i", "-q"}, Cols: 120, Rows: 40})
		scr.expect(t, `>>> $`)
		typeKeys(t, s, "import os; os.get_terminal_size()\r")
		scr.expect(t, `os.terminal_size\(columns=120, lines=40\)\r\n>>> $`)
		typeKeys(t, s, "6*7\r")
		scr.expect(t, `\r\n42\r\n>>> $`)
		typeKeys(t, s, "\x04") // Ctrl-D ends the REPL
		if res, err := s.Wait(); err != nil || res.ExitCode != 0 {
			t.Fatalf("python exit: %+v %v; screen %q", res, err, scr.all())
		}
	})

	t.Run("end of stdin is the end of input", func(t *testing.T) {
		s, scr := n.ptyExec(t, id, api.ExecRequest{Shell: "cat; echo cat-done"})
		typeKeys(t, s, "one\r")
		scr.expect(t, `one\r\none\r\n`) // the terminal's echo, then cat's copy
		if err := s.CloseStdin(); err != nil {
			t.Fatal(err)
		}
		scr.expect(t, `cat-done\r\n`)
		if res, err := s.Wait(); err != nil || res.ExitCode != 0 {
			t.Fatalf("after the end of stdin: %+v %v", res, err)
		}
	})

	t.Run("full screen", func(t *testing.T) {
		// A full-screen program: clear the screen, draw at a position, read a key
		// in raw mode (as curses programs do), answer with what it read.
		s, scr := n.ptyExec(t, id, api.ExecRequest{Shell: `stty raw -echo; printf '\033[2J\033[5;10Hpress a key'; k=$(dd bs=1 count=1 2>/dev/null); stty sane; printf '\033[6;1Hgot %s\n' "$k"`})
		scr.expect(t, `\x1b\[2J\x1b\[5;10Hpress a key`)
		typeKeys(t, s, "q")
		scr.expect(t, `\x1b\[6;1Hgot q\r\n`)
		if res, err := s.Wait(); err != nil || res.ExitCode != 0 {
			t.Fatalf("full screen: %+v %v", res, err)
		}
	})
}

// TestPTYProcessSurvivesRestart: a background process on a terminal lives on
// through a kill -9 and restart of the server; it is listed and its output
// (written before and after the restart) is readable.
func TestPTYProcessSurvivesRestart(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	id := n.create(t, api.CreateSandboxRequest{})
	p, err := n.cl.StartProcess(ctx, id, api.ExecRequest{TTY: true, Cols: 90, Rows: 20,
		Shell: `tty; stty size; i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.1; done`})
	if err != nil {
		t.Fatal(err)
	}
	logs := func() string {
		t.Helper()
		rc, err := n.cl.ProcessLogs(ctx, id, p.ID, "stdout", 0)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		b, _ := io.ReadAll(rc)
		return string(b)
	}
	waitLogs := func(want string) string {
		t.Helper()
		var l string
		if !testwait.Until(30*time.Second, func() bool { l = logs(); return strings.Contains(l, want) }) {
			t.Fatalf("logs never showed %q: %q", want, l)
		}
		return l
	}
	before := waitLogs("tick 3\r\n")
	if !strings.HasPrefix(before, "/dev/pts/") || !strings.Contains(before, "\r\n20 90\r\n") {
		t.Fatalf("not on a terminal of 90x20: %q", before)
	}

	n.stop(false) // kill -9
	time.Sleep(500 * time.Millisecond)
	n.start()

	ps, err := n.cl.ListProcesses(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, q := range ps {
		found = found || (q.ID == p.ID && q.Running)
	}
	if !found {
		t.Fatalf("process %s not listed as running after the restart: %+v", p.ID, ps)
	}
	// It kept writing: a tick well after the last one seen before the restart.
	n0 := strings.Count(before, "tick ")
	after := waitLogs(fmt.Sprintf("tick %d\r\n", n0+10))
	if !strings.HasPrefix(after, before) {
		t.Fatalf("output before the restart changed:\nbefore %q\nafter  %q", before, after)
	}
	if err := n.cl.KillProcess(ctx, id, p.ID, "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	got, err := n.cl.WaitProcess(ctx, id, p.ID, 20*time.Second)
	if err != nil || got.Running {
		t.Fatalf("kill after restart: %+v %v", got, err)
	}
}

// rawStream is an exec/stream exchange spoken by hand, to send what the client
// libraries refuse to send.
type rawStream struct {
	enc    *json.Encoder
	pw     *io.PipeWriter
	dec    *json.Decoder
	status int
	body   io.ReadCloser
}

func (n *node) rawStream(t *testing.T, id string, first string) *rawStream {
	t.Helper()
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", "http://"+n.addr+"/v1/sandboxes/"+id+"/exec/stream", pr)
	req.Header.Set("Authorization", "Bearer "+n.token)
	go func() { _, _ = io.WriteString(pw, first+"\n") }()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pw.Close(); resp.Body.Close() })
	return &rawStream{enc: json.NewEncoder(pw), pw: pw, dec: json.NewDecoder(bufio.NewReader(resp.Body)), status: resp.StatusCode, body: resp.Body}
}

func (r *rawStream) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(r.pw, line+"\n"); err != nil {
		t.Fatalf("send %s: %v", line, err)
	}
}

// until reads events until one of type typ and returns it (failing on the end of
// the stream).
func (r *rawStream) until(t *testing.T, typ string) api.StreamEvent {
	t.Helper()
	for {
		var ev api.StreamEvent
		if err := r.dec.Decode(&ev); err != nil {
			t.Fatalf("stream ended waiting for %q: %v", typ, err)
		}
		if ev.Type == typ {
			return ev
		}
	}
}

// TestPTYBadInput: a resize on an exec without a terminal, a zero size and a
// huge size are refused with invalid_argument, and nothing else is disturbed: the
// sandbox and a terminal session in another sandbox go on.
func TestPTYBadInput(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	id := n.create(t, api.CreateSandboxRequest{})
	other := n.create(t, api.CreateSandboxRequest{})
	bystander, bscr := n.ptyExec(t, other, api.ExecRequest{Cmd: []string{"sh", "-i"}, Env: map[string]string{"PS1": "$ "}})
	bscr.expect(t, `\$ $`)

	// Sizes out of range in the request: 400 before anything runs.
	for _, first := range []string{
		`{"cmd":["true"],"tty":true,"cols":100000,"rows":24}`,
		`{"cmd":["true"],"tty":true,"cols":80,"rows":1001}`,
		`{"cmd":["true"],"tty":true,"cols":-1,"rows":24}`,
	} {
		r := n.rawStream(t, id, first)
		var eb api.ErrorBody
		_ = r.dec.Decode(&eb)
		if r.status != http.StatusBadRequest || eb.Error == nil || eb.Error.Code != api.CodeInvalidArgument {
			t.Errorf("%s: status %d, error %+v; want 400 invalid_argument", first, r.status, eb.Error)
		}
	}
	_, err := n.cl.StartProcess(ctx, id, api.ExecRequest{Cmd: []string{"true"}, TTY: true, Cols: 100000})
	wantAPIError(t, err, api.CodeInvalidArgument, http.StatusBadRequest)

	// A resize of an exec without a terminal, a zero or huge size on one with a
	// terminal, an unknown signal: each line is refused with an input_error event
	// (invalid_argument) and the exec goes on: the next input still arrives.
	for _, c := range []struct{ first, line string }{
		{`{"timeout_ms":60000,"cmd":["sh","-c","echo ready; exec cat"]}`, `{"resize":{"cols":80,"rows":24}}`},
		{`{"timeout_ms":60000,"cmd":["sh","-c","echo ready; exec cat"],"tty":true}`, `{"resize":{"cols":0,"rows":0}}`},
		{`{"timeout_ms":60000,"cmd":["sh","-c","echo ready; exec cat"],"tty":true}`, `{"resize":{"cols":1001,"rows":24}}`},
		{`{"timeout_ms":60000,"cmd":["sh","-c","echo ready; exec cat"],"tty":true}`, `{"signal":"SIGNOPE"}`},
	} {
		r := n.rawStream(t, id, c.first)
		if r.status != http.StatusOK {
			t.Fatalf("%s: status %d", c.first, r.status)
		}
		r.until(t, "stdout")
		r.send(t, c.line)
		ev := r.until(t, "input_error")
		if ev.Error == nil || ev.Error.Code != api.CodeInvalidArgument || ev.Error.Message == "" {
			t.Errorf("%s then %s: input_error %+v, want invalid_argument", c.first, c.line, ev.Error)
		}
		r.send(t, `{"stdin":"`+base64.StdEncoding.EncodeToString([]byte("after\n"))+`"}`)
		var got []byte
		for !strings.Contains(string(got), "after") {
			var ev api.StreamEvent
			if err := r.dec.Decode(&ev); err != nil || ev.Type == "exit" || ev.Type == "error" {
				t.Fatalf("%s then %s: the exec did not go on: %q, then %+v %v", c.first, c.line, got, ev, err)
			}
			got = append(got, ev.Data...)
		}
	}
	// Undisturbed: the sandbox answers, the other sandbox's session goes on.
	if r := n.sh(t, id, "echo ok"); r.Stdout != "ok\n" {
		t.Fatalf("sandbox after bad input: %+v", r)
	}
	typeKeys(t, bystander, "echo still here\r")
	bscr.expect(t, `still here\r\n\$ $`)
	typeKeys(t, bystander, "exit\r")
	if res, err := bystander.Wait(); err != nil || res.ExitCode != 0 {
		t.Fatalf("bystander: %+v %v", res, err)
	}
}

func wantAPIError(t *testing.T, err error, code api.Code, status int) {
	t.Helper()
	ae, ok := api.AsError(err)
	if !ok || ae.Code != code || ae.Status != status {
		t.Fatalf("error %v, want %s (HTTP %d)", err, code, status)
	}
}
