package trajectory

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/dsec-dev/dsec/pkg/api"
)

// Result formats. The log keeps typed outcomes; logs written before the
// trajectory decorator kept the raw /v1 answer (status, headers, body), which
// Outcome decodes on read.
const (
	// FormatHTTP is a raw /v1 answer: Status, Header and Body as sent.
	FormatHTTP = 0
	// FormatTyped is an Outcome: Body is its JSON.
	FormatTyped = 1
)

// Outcome is a step's typed result: what the session operation returned. Exactly
// the fields of the step's operation are set; Error is set when the operation
// failed with an error that is a result (not_found, bad_gateway, ...).
type Outcome struct {
	Error *api.Error `json:"error,omitempty"`
	// Exec is the result of exec, and of exec_stream (without output: see Events).
	Exec *api.ExecResult `json:"exec,omitempty"`
	// Started and PID: exec_stream's process started (a stream that failed after
	// it started has Started and Error).
	Started bool `json:"started,omitempty"`
	PID     int  `json:"pid,omitempty"`
	// Events is exec_stream's output in order.
	Events  []Event      `json:"events,omitempty"`
	Process *api.Process `json:"process,omitempty"`
	// File is the file written (write_file) or read (read_file).
	File *api.FileInfo `json:"file,omitempty"`
	// Data is read_file's content or an HTTP answer's body.
	Data   []byte            `json:"data,omitempty"`
	HTTP   *HTTPHead         `json:"http,omitempty"`
	FnCall *api.FnCallResult `json:"fncall,omitempty"`
}

// Event is a chunk of a streaming exec's output.
type Event struct {
	Stream string `json:"stream"` // stdout or stderr
	Data   []byte `json:"data"`
}

// HTTPHead is the status and headers of a proxied HTTP answer.
type HTTPHead struct {
	Status int         `json:"status"`
	Header http.Header `json:"header,omitempty"`
}

// TypedResult encodes o as a step result.
func TypedResult(o Outcome) (Result, error) {
	b, err := json.Marshal(o)
	if err != nil {
		return Result{}, fmt.Errorf("encoding step outcome: %w", err)
	}
	return Result{Format: FormatTyped, Body: b, BodySize: int64(len(b)), BodySHA256: SHA256(b)}, nil
}

// truncatedResult is the result of a step whose answer was over MaxBodyLog.
func truncatedResult(size int64, sum string) Result {
	return Result{Format: FormatTyped, BodySize: size, BodySHA256: sum, Truncated: true}
}

// Outcome decodes a logged result of op, in either format.
func (r *Result) Outcome(op string) (Outcome, error) {
	if r.Format == FormatTyped {
		var o Outcome
		if err := json.Unmarshal(r.Body, &o); err != nil {
			return Outcome{}, fmt.Errorf("decoding step outcome: %w", err)
		}
		return o, nil
	}
	return legacyOutcome(op, r)
}

// legacyOutcome decodes a raw /v1 answer of op (the log format before the
// decorator) into an Outcome.
func legacyOutcome(op string, r *Result) (Outcome, error) {
	var o Outcome
	if op == OpHTTP {
		h := http.Header{}
		for k, v := range r.Header {
			h.Set(k, v)
		}
		o.HTTP, o.Data = &HTTPHead{Status: r.Status, Header: h}, r.Body
		return o, nil
	}
	if r.Status >= 400 {
		var eb api.ErrorBody
		if err := json.Unmarshal(r.Body, &eb); err != nil || eb.Error == nil {
			return o, fmt.Errorf("decoding logged error answer (status %d): %v", r.Status, err)
		}
		eb.Error.Status = r.Status
		o.Error = eb.Error
		return o, nil
	}
	var err error
	switch op {
	case OpExec:
		o.Exec = &api.ExecResult{}
		err = json.Unmarshal(r.Body, o.Exec)
	case OpStartProcess:
		o.Process = &api.Process{}
		err = json.Unmarshal(r.Body, o.Process)
	case OpWriteFile:
		o.File = &api.FileInfo{}
		err = json.Unmarshal(r.Body, o.File)
	case OpFnCall:
		o.FnCall = &api.FnCallResult{}
		err = json.Unmarshal(r.Body, o.FnCall)
	case OpReadFile:
		o.Data = r.Body
		fi := api.FileInfo{Size: int64(len(r.Body)), Type: "file"}
		if m, perr := strconv.ParseUint(r.Header["X-Dsec-Mode"], 8, 32); perr == nil {
			fi.Mode = uint32(m)
		}
		if t, perr := http.ParseTime(r.Header["Last-Modified"]); perr == nil {
			fi.ModTime = t.UTC()
		}
		o.File = &fi
	case OpExecStream:
		err = legacyStream(r.Body, &o)
	case OpMkdir, OpRemove, OpUploadArchive:
	default:
		return o, fmt.Errorf("logged step of unknown operation %q", op)
	}
	if err != nil {
		return o, fmt.Errorf("decoding logged %s answer: %w", op, err)
	}
	return o, nil
}

// legacyStream decodes the NDJSON events of a logged exec/stream answer.
func legacyStream(body []byte, o *Outcome) error {
	for _, line := range bytes.Split(body, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var ev api.StreamEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return err
		}
		switch ev.Type {
		case "started":
			o.Started, o.PID = true, ev.PID
		case "stdout", "stderr":
			o.Events = append(o.Events, Event{Stream: ev.Type, Data: ev.Data})
		case "exit":
			o.Exec = ev.Result
		case "error":
			o.Error = ev.Error
			if o.Error != nil {
				o.Error.Status = api.StatusOf(o.Error.Code)
			}
		}
	}
	if o.Exec == nil && o.Error == nil {
		return fmt.Errorf("stream answer has no exit or error event")
	}
	return nil
}

// streamEvents renders a stream outcome as the /v1 NDJSON events, for display.
func streamEvents(o Outcome) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	if o.Started {
		_ = enc.Encode(api.StreamEvent{Type: "started", PID: o.PID})
	}
	for _, ev := range o.Events {
		_ = enc.Encode(api.StreamEvent{Type: ev.Stream, Data: ev.Data})
	}
	switch {
	case o.Error != nil:
		_ = enc.Encode(api.StreamEvent{Type: "error", Error: o.Error})
	case o.Exec != nil:
		_ = enc.Encode(api.StreamEvent{Type: "exit", Result: o.Exec})
	}
	return b.Bytes()
}

// okStatus is the /v1 status of a successful op, for display.
func okStatus(op string) int {
	switch op {
	case OpStartProcess:
		return http.StatusCreated
	case OpMkdir, OpRemove, OpUploadArchive:
		return http.StatusNoContent
	}
	return http.StatusOK
}

// StepView converts a logged step to its wire form. Typed and legacy steps look
// the same: the result as JSON when the op returns a value, the data (file
// bytes, HTTP body, exec/stream's NDJSON events) in Body.
func StepView(st Step) api.TrajectoryStep {
	v := api.TrajectoryStep{Trajectory: st.Trajectory, Step: st.N, Op: st.Op, Fingerprint: st.Fingerprint,
		Args: st.Args, SandboxID: st.SandboxID, State: st.State, StartedAt: st.StartedAt, FinishedAt: st.FinishedAt}
	if st.FinishedAt != nil {
		v.DurationMs = float64(st.FinishedAt.Sub(st.StartedAt).Microseconds()) / 1000
	}
	res := st.Result
	if res == nil {
		return v
	}
	v.BodySize, v.BodySHA256, v.Truncated = res.BodySize, res.BodySHA256, res.Truncated
	if res.Truncated {
		v.Status = res.Status
		return v
	}
	o, err := res.Outcome(st.Op)
	if err != nil {
		v.Body = res.Body
		return v
	}
	v.Status = okStatus(st.Op)
	var val any
	switch {
	case st.Op == OpHTTP && o.HTTP != nil:
		v.Status, v.Body = o.HTTP.Status, o.Data
		v.Headers = map[string]string{}
		for k, vals := range o.HTTP.Header {
			v.Headers[k] = strings.Join(vals, ", ")
		}
	case st.Op == OpExecStream:
		if o.Error != nil && !o.Started {
			v.Status, val = o.Error.Status, api.ErrorBody{Error: o.Error}
			break
		}
		v.Body = streamEvents(o)
	case o.Error != nil:
		v.Status, val = api.StatusOf(o.Error.Code), api.ErrorBody{Error: o.Error}
	case o.Exec != nil:
		val = o.Exec
	case o.Process != nil:
		val = o.Process
	case o.FnCall != nil:
		val = o.FnCall
	case st.Op == OpReadFile:
		v.Body = o.Data
	case o.File != nil:
		val = o.File
	}
	if val != nil {
		if b, err := json.Marshal(val); err == nil {
			v.Result = b
		}
	}
	if res.Format == FormatTyped { // size and hash of what is shown, as for a raw answer
		shown := v.Body
		if v.Result != nil {
			shown = v.Result
		}
		v.BodySize, v.BodySHA256 = int64(len(shown)), SHA256(shown)
	}
	return v
}
