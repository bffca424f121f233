package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/coder/websocket"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Terminal protocol (GET /ui/api/terminal/{id}, a WebSocket):
//
//	client → server, first:  text {"token": "...", "cols": 80, "rows": 24}
//	client → server, then:   binary frames are keystrokes (the terminal's input);
//	                         text {"resize": {"cols": C, "rows": R}}
//	server → client:         binary frames are the terminal's output;
//	                         text {"type": "started", "pid": N},
//	                         {"type": "exit", "exit_code": N},
//	                         {"type": "error", "code": "...", "message": "..."}
//
// The connection then closes with one of the close codes below, its reason a
// short form of the message.
const (
	CloseExited       websocket.StatusCode = websocket.StatusNormalClosure
	CloseBadRequest   websocket.StatusCode = 4400 // a malformed first message or size
	CloseUnauthorized websocket.StatusCode = 4401 // wrong or missing token
	CloseNotFound     websocket.StatusCode = 4404 // no such sandbox, or deleted while open
	CloseFailed       websocket.StatusCode = 4500 // the exec failed
)

// Terminal limits.
const (
	helloTimeout   = 10 * time.Second
	deleteGrace    = 3 * time.Second // how long a failed exec waits to see its sandbox deleted
	maxTermMessage = 1 << 20
)

// TerminalShell is what a terminal runs: a login-ish interactive shell, bash
// where the image has it.
const TerminalShell = "if command -v bash >/dev/null 2>&1; then exec bash -i; else exec sh -i; fi"

type termHello struct {
	Token string `json:"token"`
	Cols  int    `json:"cols"`
	Rows  int    `json:"rows"`
}

type termInput struct {
	Resize *api.TermSize `json:"resize"`
}

type termEvent struct {
	Type     string   `json:"type"`
	PID      int      `json:"pid,omitempty"`
	ExitCode *int     `json:"exit_code,omitempty"`
	Code     api.Code `json:"code,omitempty"`
	Message  string   `json:"message,omitempty"`
}

// terminal bridges one WebSocket to a streaming exec with a TTY.
func (h *Handler) terminal(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	// The default origin check (the page's origin must be this host) applies.
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept answered the request
	}
	defer c.CloseNow()
	c.SetReadLimit(maxTermMessage)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()

	hello, err := readHello(ctx, c)
	if err != nil {
		closeWith(ctx, c, CloseBadRequest, errdefs.Invalid("%v", err))
		return
	}
	if !h.tok(hello.Token) {
		closeWith(ctx, c, CloseUnauthorized, api.NewError(api.CodeUnauthorized, "invalid token: the dashboard's token does not match the server's"))
		return
	}
	size := api.TermSize{Cols: hello.Cols, Rows: hello.Rows}
	if err := session.CheckControl(session.Control{Resize: &size}, true); err != nil {
		closeWith(ctx, c, CloseBadRequest, err)
		return
	}
	if _, err := h.opts.Service.Get(ctx, id); err != nil {
		h.closeExecError(ctx, c, id, err)
		return
	}

	stdin, stdinW := io.Pipe()
	control := make(chan session.Control, 8)
	go func() {
		// The input pump: it ends (and ends the exec) when the browser goes.
		defer cancel()
		defer stdinW.Close()
		for {
			typ, data, err := c.Read(ctx)
			if err != nil {
				return
			}
			if typ == websocket.MessageBinary {
				if _, err := stdinW.Write(data); err != nil {
					return
				}
				continue
			}
			var in termInput
			if err := json.Unmarshal(data, &in); err != nil || in.Resize == nil {
				sendEvent(ctx, c, termEvent{Type: "input_error", Code: api.CodeInvalidArgument, Message: "a text message must be {\"resize\": {\"cols\": C, \"rows\": R}}"})
				continue
			}
			ctl := session.Control{Resize: in.Resize}
			if err := session.CheckControl(ctl, true); err != nil {
				sendEvent(ctx, c, termEvent{Type: "input_error", Code: errdefs.CodeOf(err), Message: err.Error()})
				continue
			}
			select {
			case control <- ctl:
			case <-ctx.Done():
				return
			}
		}
	}()

	out := &wsWriter{ctx: ctx, c: c}
	req := api.ExecRequest{Shell: h.opts.Shell, TTY: true, Cols: size.Cols, Rows: size.Rows,
		Env: map[string]string{"TERM": "xterm-256color"}}
	res, err := h.opts.Service.ExecStream(ctx, id, req, session.Stream{
		Stdin: stdin, Stdout: out, Stderr: out, Control: control,
		Started: func(pid int) { sendEvent(ctx, c, termEvent{Type: "started", PID: pid}) },
	})
	_ = stdin.Close()
	if err != nil {
		h.closeExecError(ctx, c, id, err)
		return
	}
	// A delete kills the shell first: a shell killed by a signal may be a
	// deleted sandbox's.
	if (res.Signal != "" || res.ExitCode < 0) && h.deleted(ctx, id) {
		closeWith(ctx, c, CloseNotFound, errdefs.NotFound("sandbox %s was deleted: the terminal is closed", id))
		return
	}
	code := res.ExitCode
	sendEvent(ctx, c, termEvent{Type: "exit", ExitCode: &code})
	why := fmt.Sprintf("the shell exited with code %d", code)
	if res.Signal != "" {
		why = "the shell was killed by " + res.Signal
	}
	_ = c.Close(CloseExited, why)
}

// deleted reports whether the sandbox is gone, or goes within deleteGrace (a
// delete cuts its processes before its record is removed).
func (h *Handler) deleted(ctx context.Context, id string) bool {
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deleteGrace)
	defer cancel()
	for {
		if _, err := h.opts.Service.Get(gctx, id); errdefs.Is(err, api.CodeNotFound) {
			return true
		}
		select {
		case <-gctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// closeExecError closes with not_found's message when the sandbox is gone
// (deleted before or while the terminal was open), else with err.
func (h *Handler) closeExecError(ctx context.Context, c *websocket.Conn, id string, err error) {
	if ctx.Err() != nil {
		return // the browser left
	}
	if errdefs.Is(err, api.CodeNotFound) || errdefs.Is(err, api.CodeSandboxGone) {
		closeWith(ctx, c, CloseNotFound, errdefs.NotFound("sandbox %s does not exist (it was deleted): the terminal is closed", id))
		return
	}
	if h.deleted(ctx, id) {
		closeWith(ctx, c, CloseNotFound, errdefs.NotFound("sandbox %s was deleted: the terminal is closed", id))
		return
	}
	h.log.WarnContext(ctx, "ui terminal: exec failed", "sandbox", id, "err", err)
	closeWith(ctx, c, CloseFailed, err)
}

func readHello(ctx context.Context, c *websocket.Conn) (termHello, error) {
	hctx, cancel := context.WithTimeout(ctx, helloTimeout)
	defer cancel()
	typ, data, err := c.Read(hctx)
	if err != nil {
		return termHello{}, fmt.Errorf("no first message: %w", err)
	}
	var hello termHello
	if typ != websocket.MessageText || json.Unmarshal(data, &hello) != nil {
		return termHello{}, errors.New(`the first message must be text {"token": ..., "cols": C, "rows": R}`)
	}
	return hello, nil
}

// closeWith sends err as an error event, then closes with code and a reason
// cut to the protocol's 123 bytes.
func closeWith(ctx context.Context, c *websocket.Conn, code websocket.StatusCode, err error) {
	e := errdefs.ToAPI(err)
	sendEvent(ctx, c, termEvent{Type: "error", Code: e.Code, Message: e.Message})
	reason := e.Message
	if len(reason) > 123 {
		reason = reason[:120] + "..."
	}
	_ = c.Close(code, reason)
}

func sendEvent(ctx context.Context, c *websocket.Conn, ev termEvent) {
	b, _ := json.Marshal(ev)
	_ = c.Write(ctx, websocket.MessageText, b)
}

// wsWriter sends each write as one binary message.
type wsWriter struct {
	ctx context.Context
	c   *websocket.Conn
}

func (w *wsWriter) Write(p []byte) (int, error) {
	if err := w.c.Write(w.ctx, websocket.MessageBinary, p); err != nil {
		return 0, err
	}
	return len(p), nil
}
