package e2b_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/dsec-dev/dsec/internal/frontend/e2b"
	pb "github.com/dsec-dev/dsec/internal/frontend/e2b/envdpb/process"
	"github.com/dsec-dev/dsec/pkg/api"
)

func bash(script string) *pb.StartRequest {
	f := false
	return &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", script}}, Stdin: &f}
}

// collect reads a process stream: every event in order, then the error it ended with.
func collect[T interface{ GetEvent() *pb.ProcessEvent }](s interface {
	Receive() bool
	Msg() T
	Err() error
}) ([]*pb.ProcessEvent, error) {
	var evs []*pb.ProcessEvent
	for s.Receive() {
		evs = append(evs, s.Msg().GetEvent())
	}
	return evs, s.Err()
}

// stdoutOf joins the stdout data of events.
func stdoutOf(evs []*pb.ProcessEvent) string {
	var out string
	for _, ev := range evs {
		out += string(ev.GetData().GetStdout())
	}
	return out
}

// started reads a Start stream's first event and returns a selector of its PID.
func started(t *testing.T, st *connect.ServerStreamForClient[pb.StartResponse]) *pb.ProcessSelector {
	t.Helper()
	if !st.Receive() || st.Msg().GetEvent().GetStart() == nil {
		t.Fatalf("no start event: %v", st.Err())
	}
	return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: st.Msg().GetEvent().GetStart().GetPid()}}
}

// output splits a process's events into stdout, stderr and the end event, and
// checks start comes first and end last.
func output(t *testing.T, evs []*pb.ProcessEvent) (pid uint32, stdout, stderr string, end *pb.ProcessEvent_EndEvent) {
	t.Helper()
	if len(evs) < 2 || evs[0].GetStart() == nil || evs[len(evs)-1].GetEnd() == nil {
		t.Fatalf("stream must start with start and end with end: %v", evs)
	}
	for _, ev := range evs[1 : len(evs)-1] {
		if d := ev.GetData(); d != nil {
			stdout += string(d.GetStdout()) + string(d.GetPty())
			stderr += string(d.GetStderr())
		} else if ev.GetKeepalive() == nil {
			t.Fatalf("unexpected event in the middle: %v", ev)
		}
	}
	return evs[0].GetStart().GetPid(), stdout, stderr, evs[len(evs)-1].GetEnd()
}

func TestStartJSONAndBinary(t *testing.T) {
	e := newEnv(t)
	c := e.create(nil)
	for _, js := range []bool{true, false} {
		st, err := e.process(c, js).Start(t.Context(), connect.NewRequest(bash("echo out; echo err >&2; exit 3")))
		if err != nil {
			t.Fatal(err)
		}
		evs, err := collect(st)
		if err != nil {
			t.Fatalf("json=%v: stream error %v", js, err)
		}
		pid, out, errs, end := output(t, evs)
		if pid == 0 || out != "out\n" || errs != "err\n" || end.GetExitCode() != 3 || !end.GetExited() || end.GetStatus() != "exit status 3" {
			t.Fatalf("json=%v: pid %d out %q err %q end %v", js, pid, out, errs, end)
		}
	}
}

func TestStartErrors(t *testing.T) {
	e := newEnv(t)
	c := e.create(nil)
	p := e.process(c, true)
	req := bash("true")
	cwd := "/nonexistent"
	req.Process.Cwd = &cwd
	st, _ := p.Start(t.Context(), connect.NewRequest(req))
	evs, err := collect(st)
	if connect.CodeOf(err) != connect.CodeInvalidArgument || len(evs) != 0 {
		t.Fatalf("bad cwd: %v events, err %v", evs, err)
	}
	st, _ = p.Start(t.Context(), connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{}}))
	if _, err := collect(st); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("no cmd: %v", err)
	}
	// A command that cannot run still starts and ends, with the error on end.
	st, _ = p.Start(t.Context(), connect.NewRequest(bash("nosuchcommand")))
	evs, err = collect(st)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, end := output(t, evs); end.GetExitCode() != 127 || end.GetError() == "" {
		t.Fatalf("end %v", end)
	}
}

func TestStdinSignalListConnect(t *testing.T) {
	e := newEnv(t)
	c := e.create(nil)
	p := e.process(c, true)
	yes := true
	req := bash("cat")
	req.Stdin = &yes
	tag := "catter"
	req.Tag = &tag
	st, err := p.Start(t.Context(), connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Receive() || st.Msg().GetEvent().GetStart() == nil {
		t.Fatalf("no start: %v", st.Err())
	}
	pid := st.Msg().GetEvent().GetStart().GetPid()
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
	lr, err := p.List(t.Context(), connect.NewRequest(&pb.ListRequest{}))
	if err != nil || len(lr.Msg.Processes) != 1 || lr.Msg.Processes[0].GetPid() != pid || lr.Msg.Processes[0].GetTag() != tag ||
		lr.Msg.Processes[0].GetConfig().GetCmd() != "/bin/bash" {
		t.Fatalf("list %v %v", lr, err)
	}
	// A second stream by tag sees the same output.
	cs, err := p.Connect(t.Context(), connect.NewRequest(&pb.ConnectRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: tag}}}))
	if err != nil {
		t.Fatal(err)
	}
	if !cs.Receive() || cs.Msg().GetEvent().GetStart().GetPid() != pid {
		t.Fatalf("connect start: %v", cs.Err())
	}
	in := &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("hello\n")}}
	if _, err := p.SendInput(t.Context(), connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: in})); err != nil {
		t.Fatal(err)
	}
	if _, err := p.CloseStdin(t.Context(), connect.NewRequest(&pb.CloseStdinRequest{Process: sel})); err != nil {
		t.Fatal(err)
	}
	evs, err := collect(st)
	if err != nil {
		t.Fatal(err)
	}
	if out := stdoutOf(evs); out != "hello\n" || evs[len(evs)-1].GetEnd() == nil {
		t.Fatalf("start stream: %q %v", out, evs)
	}
	cevs, err := collect(cs)
	if err != nil || cevs[len(cevs)-1].GetEnd() == nil {
		t.Fatalf("connect stream %v %v", cevs, err)
	}
	// Ended: List no longer shows it; input and signals say NotFound.
	lr, _ = p.List(t.Context(), connect.NewRequest(&pb.ListRequest{}))
	if len(lr.Msg.Processes) != 0 {
		t.Fatalf("ended process listed: %v", lr.Msg)
	}
	_, err = p.SendInput(t.Context(), connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: in}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("input to ended: %v", err)
	}
	// A late Connect still gets start and end.
	cs, _ = p.Connect(t.Context(), connect.NewRequest(&pb.ConnectRequest{Process: sel}))
	if evs, err := collect(cs); err != nil || len(evs) != 2 || evs[1].GetEnd() == nil {
		t.Fatalf("late connect %v %v", evs, err)
	}

	// Kill a sleeper.
	st, _ = p.Start(t.Context(), connect.NewRequest(bash("sleep 1000")))
	sel = started(t, st)
	_, err = p.SendSignal(t.Context(), connect.NewRequest(&pb.SendSignalRequest{Process: sel, Signal: pb.Signal_SIGNAL_UNSPECIFIED}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("unspecified signal: %v", err)
	}
	if _, err := p.SendSignal(t.Context(), connect.NewRequest(&pb.SendSignalRequest{Process: sel, Signal: pb.Signal_SIGNAL_SIGKILL})); err != nil {
		t.Fatal(err)
	}
	evs, err = collect(st)
	if err != nil {
		t.Fatal(err)
	}
	end := evs[len(evs)-1].GetEnd()
	if end.GetExitCode() != -1 || end.GetExited() || end.GetStatus() != "signal: killed" {
		t.Fatalf("killed end %v", end)
	}
	// stdin false: input refused; no terminal: resize refused; unknown pid: NotFound.
	st, _ = p.Start(t.Context(), connect.NewRequest(bash("sleep 1000")))
	sel = started(t, st)
	_, err = p.SendInput(t.Context(), connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: in}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("input without stdin: %v", err)
	}
	_, err = p.Update(t.Context(), connect.NewRequest(&pb.UpdateRequest{Process: sel, Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 10, Rows: 5}}}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("resize without tty: %v", err)
	}
	for _, bad := range []*pb.ProcessSelector{{Selector: &pb.ProcessSelector_Pid{Pid: 99999}}, {Selector: &pb.ProcessSelector_Tag{Tag: "nope"}}} {
		_, err = p.SendSignal(t.Context(), connect.NewRequest(&pb.SendSignalRequest{Process: bad, Signal: pb.Signal_SIGNAL_SIGKILL}))
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("unknown %v: %v", bad, err)
		}
	}
	_, err = p.SendSignal(t.Context(), connect.NewRequest(&pb.SendSignalRequest{Signal: pb.Signal_SIGNAL_SIGKILL}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("no selector: %v", err)
	}
	_, _ = p.SendSignal(t.Context(), connect.NewRequest(&pb.SendSignalRequest{Process: sel, Signal: pb.Signal_SIGNAL_SIGTERM}))
	if evs, _ := collect(st); evs[len(evs)-1].GetEnd().GetStatus() != "signal: terminated" {
		t.Fatalf("sigterm end %v", evs[len(evs)-1])
	}
}

func TestProcessOutlivesItsStream(t *testing.T) {
	e := newEnv(t)
	c := e.create(nil)
	p := e.process(c, true)
	ctx, cancel := context.WithCancel(t.Context())
	st, _ := p.Start(ctx, connect.NewRequest(bash("sleep 1000")))
	st.Receive()
	pid := st.Msg().GetEvent().GetStart().GetPid()
	cancel() // the client goes away; the process stays
	time.Sleep(50 * time.Millisecond)
	lr, _ := p.List(t.Context(), connect.NewRequest(&pb.ListRequest{}))
	if len(lr.Msg.Processes) != 1 || lr.Msg.Processes[0].GetPid() != pid {
		t.Fatalf("process gone with its stream: %v", lr.Msg)
	}
	// Killing the sandbox ends it and forgets it.
	e.call("DELETE", "/sandboxes/"+c.SandboxID, nil)
	res, b := e.envdCall(c, "POST", "/process.Process/List", "application/json", []byte(`{}`))
	if res.StatusCode != http.StatusBadGateway {
		t.Fatalf("list on a killed sandbox: %d %s", res.StatusCode, b)
	}
}

func TestStreamTimeoutKillsProcess(t *testing.T) {
	e := newEnv(t)
	c := e.create(nil)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	st, _ := e.process(c, true).Start(ctx, connect.NewRequest(bash("sleep 1000")))
	evs, err := collect(st)
	ended := len(evs) > 0 && evs[len(evs)-1].GetEnd() != nil
	if !ended && connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Fatalf("events %v err %v", evs, err)
	}
	time.Sleep(100 * time.Millisecond)
	lr, _ := e.process(c, true).List(t.Context(), connect.NewRequest(&pb.ListRequest{}))
	if len(lr.Msg.Processes) != 0 {
		t.Fatalf("process outlived its timeout: %v", lr.Msg)
	}
}

func TestPTY(t *testing.T) {
	e := newEnv(t)
	c := e.create(nil)
	p := e.process(c, false)
	req := &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-i", "-l"}}, Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 80, Rows: 24}}}
	st, err := p.Start(t.Context(), connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	sel := started(t, st)
	if _, err := p.Update(t.Context(), connect.NewRequest(&pb.UpdateRequest{Process: sel, Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 100, Rows: 30}}})); err != nil {
		t.Fatal(err)
	}
	_, err = p.Update(t.Context(), connect.NewRequest(&pb.UpdateRequest{Process: sel, Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 0, Rows: 30}}}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("zero cols: %v", err)
	}
	if _, err := p.CloseStdin(t.Context(), connect.NewRequest(&pb.CloseStdinRequest{Process: sel})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("close stdin of a tty: %v", err)
	}
	if got := e.n.Resizes(); len(got) != 1 || got[0] != (api.TermSize{Cols: 100, Rows: 30}) {
		t.Fatalf("resizes that reached the node: %v", got)
	}
	// The shell echoes its input and prints the size its terminal has now.
	in := &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: []byte("stty size; exit\n")}}
	if _, err := p.SendInput(t.Context(), connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: in})); err != nil {
		t.Fatal(err)
	}
	evs, err := collect(st)
	if err != nil {
		t.Fatal(err)
	}
	var got string
	for _, ev := range evs {
		if ev.GetData().GetStdout() != nil {
			t.Fatal("a terminal's output must come as pty data")
		}
		got += string(ev.GetData().GetPty())
	}
	if !strings.Contains(got, "stty size; exit\r\n") || !strings.Contains(got, "\r\n30 100\r\n") || evs[len(evs)-1].GetEnd() == nil {
		t.Fatalf("pty output %q", got)
	}
}

// envelope frames one Connect streaming message.
func envelope(flags byte, msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	b[0] = flags
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// unframe splits a Connect stream body into its messages and end-stream JSON.
func unframe(t *testing.T, body []byte) (msgs []string, end string) {
	t.Helper()
	for len(body) > 0 {
		if len(body) < 5 {
			t.Fatalf("truncated envelope %q", body)
		}
		n := binary.BigEndian.Uint32(body[1:5])
		msg := string(body[5 : 5+n])
		if body[0]&0x02 != 0 {
			end = msg
		} else {
			msgs = append(msgs, msg)
		}
		body = body[5+n:]
	}
	return msgs, end
}

func TestConnectEnvelopesAndProtoJSON(t *testing.T) {
	e := newEnv(t)
	c := e.create(nil)
	// Server stream over raw HTTP: enveloped JSON in, enveloped JSON out, the
	// end-stream message last; unknown request fields are ignored.
	body := envelope(0, []byte(`{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"]},"stdin":false,"someFutureField":{"x":1}}`))
	res, b := e.envdCall(c, "POST", "/process.Process/Start", "application/connect+json", body)
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("%d %s %q", res.StatusCode, res.Header.Get("Content-Type"), b)
	}
	msgs, end := unframe(t, b)
	if len(msgs) < 3 || !strings.Contains(msgs[0], `"start"`) || !strings.Contains(msgs[len(msgs)-1], `"end"`) || end != "{}" {
		t.Fatalf("messages %q end %q", msgs, end)
	}
	// bytes are base64 in proto3 JSON.
	if !strings.Contains(strings.Join(msgs, ""), `"stdout":"aGkK"`) {
		t.Fatalf("stdout not base64: %q", msgs)
	}
	// An error ends the stream in its end-stream message, with HTTP 200.
	body = envelope(0, []byte(`{"process":{"cmd":"/bin/bash","args":["-c","true"],"cwd":"/nonexistent"}}`))
	res, b = e.envdCall(c, "POST", "/process.Process/Start", "application/connect+json", body)
	msgs, end = unframe(t, b)
	var ee struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if res.StatusCode != 200 || len(msgs) != 0 || json.Unmarshal([]byte(end), &ee) != nil || ee.Error.Code != "invalid_argument" {
		t.Fatalf("error stream: %d %q %q", res.StatusCode, msgs, end)
	}
	// Unary JSON: int64 as a string, enums by name, timestamps in RFC 3339.
	res, b = e.envdCall(c, "POST", "/filesystem.Filesystem/Stat", "application/json", []byte(`{"path":"/etc/hostname","unknown":true}`))
	if res.StatusCode != 200 {
		t.Fatalf("stat %d %s", res.StatusCode, b)
	}
	var st map[string]map[string]any
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	if st["entry"]["size"] != "8" || st["entry"]["type"] != "FILE_TYPE_FILE" || st["entry"]["permissions"] != "-rw-r--r--" {
		t.Fatalf("proto3 JSON: %s", b)
	}
	if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(st["entry"]["modifiedTime"])); err != nil {
		t.Fatalf("modifiedTime: %s", b)
	}
	// Enums are also accepted by number, as proto3 JSON says.
	sig := `{"process":{"pid":424242},"signal":9}`
	res, b = e.envdCall(c, "POST", "/process.Process/SendSignal", "application/json", []byte(sig))
	if res.StatusCode != http.StatusNotFound || !strings.Contains(string(b), `"not_found"`) {
		t.Fatalf("signal by number: %d %s", res.StatusCode, b)
	}
	sig = `{"process":{"pid":424242},"signal":"SIGNAL_SIGKILL"}`
	if res, b = e.envdCall(c, "POST", "/process.Process/SendSignal", "application/json", []byte(sig)); res.StatusCode != http.StatusNotFound {
		t.Fatalf("signal by name: %d %s", res.StatusCode, b)
	}
}

func TestEnvdBadInput(t *testing.T) {
	e := newEnv(t, func(o *e2b.Options) { o.MaxMessageBytes = 1024 })
	c := e.create(nil)
	check := func(name string, res *http.Response, b []byte, status int, code string) {
		t.Helper()
		if res.StatusCode != status || !strings.Contains(string(b), code) {
			t.Errorf("%s: %d %s, want %d %s", name, res.StatusCode, b, status, code)
		}
	}
	// Malformed: garbage instead of an envelope, broken JSON, a wrong field type.
	res, b := e.envdCall(c, "POST", "/process.Process/Start", "application/connect+json", []byte("xx"))
	if _, end := unframe(t, b); !strings.Contains(end, `"invalid_argument"`) && !strings.Contains(end, `"internal"`) {
		t.Errorf("garbage envelope: %d %q", res.StatusCode, b)
	}
	res, b = e.envdCall(c, "POST", "/filesystem.Filesystem/Stat", "application/json", []byte(`{"path":`))
	check("broken JSON", res, b, 400, "invalid_argument")
	res, b = e.envdCall(c, "POST", "/filesystem.Filesystem/Stat", "application/json", []byte(`{"path":5}`))
	check("wrong type", res, b, 400, "invalid_argument")
	// Unknown method and unknown service.
	res, b = e.envdCall(c, "POST", "/process.Process/Nope", "application/json", []byte(`{}`))
	check("unknown method", res, b, 404, "")
	res, b = e.envdCall(c, "POST", "/other.Service/Do", "application/json", []byte(`{}`))
	check("unknown service", res, b, 404, "")
	// Oversize message.
	big := `{"path":"` + strings.Repeat("a", 4096) + `"}`
	res, b = e.envdCall(c, "POST", "/filesystem.Filesystem/Stat", "application/json", []byte(big))
	check("oversize", res, b, 429, "resource_exhausted")
	// Missing sandbox header, bad access token, unknown sandbox.
	res, b = e.envdCall(c, "POST", "/filesystem.Filesystem/Stat", "application/json", []byte(`{"path":"/"}`), e2b.SandboxIDHeader, "")
	check("no sandbox header", res, b, 400, "invalid_argument")
	res, b = e.envdCall(c, "GET", "/files?path=/etc/hostname", "", nil, e2b.SandboxIDHeader, "")
	checkErr(t, res, b, 400)
	res, b = e.envdCall(c, "POST", "/filesystem.Filesystem/Stat", "application/json", []byte(`{"path":"/"}`), e2b.AccessTokenHeader, "bad")
	check("bad token", res, b, 401, "unauthenticated")
	res, b = e.envdCall(c, "GET", "/health", "", nil, e2b.AccessTokenHeader, "")
	checkErr(t, res, b, 401)
	// Another sandbox's token does not open this one.
	other := e.create(nil)
	res, b = e.envdCall(c, "GET", "/health", "", nil, e2b.AccessTokenHeader, other.EnvdAccessToken)
	checkErr(t, res, b, 401)
	// The API key works too.
	if res, b = e.envdCall(c, "GET", "/health", "", nil, e2b.AccessTokenHeader, "", "X-API-Key", testKey); res.StatusCode != 204 {
		t.Errorf("api key on envd: %d %s", res.StatusCode, b)
	}
	// Unknown sandbox: E2B's proxy answer.
	gone := created{SandboxID: "sb-nope", EnvdAccessToken: ""}
	res, b = e.envdCall(gone, "GET", "/health", "", nil, "X-API-Key", testKey)
	var pe struct {
		SandboxID string `json:"sandboxId"`
		Message   string `json:"message"`
		Code      int    `json:"code"`
	}
	if res.StatusCode != 502 || json.Unmarshal(b, &pe) != nil || pe.SandboxID != "sb-nope" || pe.Code != 502 || pe.Message == "" {
		t.Errorf("unknown sandbox: %d %s", res.StatusCode, b)
	}
	// Nothing was disturbed: the sandbox still answers.
	if res, b = e.envdCall(c, "GET", "/health", "", nil); res.StatusCode != http.StatusNoContent {
		t.Fatalf("health after bad input: %d %s", res.StatusCode, b)
	}
	st, _ := e.process(c, true).Start(t.Context(), connect.NewRequest(bash("echo ok")))
	if evs, err := collect(st); err != nil || len(evs) < 3 {
		t.Fatalf("exec after bad input: %v %v", evs, err)
	}
}

func TestDeadSandboxOnEnvd(t *testing.T) {
	e := newEnv(t)
	c := e.create(nil)
	e.call("POST", "/sandboxes/"+c.SandboxID+"/pause", nil)
	res, b := e.envdCall(c, "GET", "/health", "", nil)
	if res.StatusCode != 502 || !strings.Contains(string(b), c.SandboxID) {
		t.Fatalf("paused sandbox health %d %s", res.StatusCode, b)
	}
	// A streaming call answers 502 too, which Connect clients read as Unavailable.
	st, _ := e.process(c, true).Start(t.Context(), connect.NewRequest(bash("true")))
	if _, err := collect(st); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("start on a paused sandbox: %v", err)
	}
	// auto-resume: traffic resumes a paused sandbox.
	ar := e.create(map[string]any{"templateID": "base", "autoPause": true, "autoResume": map[string]bool{"enabled": true}})
	e.call("POST", "/sandboxes/"+ar.SandboxID+"/pause", nil)
	if res, b := e.envdCall(ar, "GET", "/health", "", nil); res.StatusCode != 204 {
		t.Fatalf("auto-resume health %d %s", res.StatusCode, b)
	}
	if sb, _ := e.n.Get(t.Context(), ar.SandboxID); sb.State != api.StateRunning {
		t.Fatalf("not resumed: %s", sb.State)
	}
}

func TestTrajectoryHeaders(t *testing.T) {
	e := newEnv(t)
	res, b := e.call("POST", "/v2/sandboxes", map[string]any{"templateID": "base"}, api.TrajectoryHeader, "traj-1", api.StepHeader, "1")
	if res.StatusCode != 201 {
		t.Fatalf("%d %s", res.StatusCode, b)
	}
	c := decode[created](t, b)
	p := e.process(c, true, api.TrajectoryHeader, "traj-1", api.StepHeader, "2")
	st, _ := p.Start(t.Context(), connect.NewRequest(bash("echo x")))
	if _, err := collect(st); err != nil {
		t.Fatal(err)
	}
	got := e.steps.get()
	if len(got) != 2 || got[0] != "create traj-1 1" || got[1] != "exec traj-1 2" {
		t.Fatalf("steps seen %q (helper calls must carry no step)", got)
	}
	// A replayed step says so.
	e.steps.setReplay()
	res, _ = e.call("POST", "/v2/sandboxes", map[string]any{"templateID": "base"}, api.TrajectoryHeader, "traj-1", api.StepHeader, "1")
	if res.Header.Get(api.ReplayedHeader) != "true" {
		t.Fatal("replayed step without X-Dsec-Replayed")
	}
	for _, hdr := range [][]string{{api.TrajectoryHeader, "t"}, {api.TrajectoryHeader, "bad id!", api.StepHeader, "1"}, {api.TrajectoryHeader, "t", api.StepHeader, "0"}} {
		res, b := e.call("POST", "/v2/sandboxes", map[string]any{"templateID": "base"}, hdr...)
		checkErr(t, res, b, 400)
	}
	// A tagged envd call for a gone sandbox reaches the session service (whose
	// trajectory log may answer it) instead of the proxy's 502.
	gone := e.create(nil)
	e.call("DELETE", "/sandboxes/"+gone.SandboxID, nil)
	res, b = e.envdCall(gone, "POST", "/filesystem.Filesystem/Stat", "application/json", []byte(`{"path":"/"}`), api.TrajectoryHeader, "traj-2", api.StepHeader, "1")
	if res.StatusCode != http.StatusNotFound || !strings.Contains(string(b), "not_found") {
		t.Fatalf("tagged call on a gone sandbox: %d %s", res.StatusCode, b)
	}
	res, b = e.envdCall(c, "POST", "/filesystem.Filesystem/Stat", "application/json", []byte(`{"path":"/"}`), api.StepHeader, "x", api.TrajectoryHeader, "t")
	if res.StatusCode != 400 || !strings.Contains(string(b), "invalid_argument") {
		t.Fatalf("bad step header on envd: %d %s", res.StatusCode, b)
	}
}

func TestStreamInput(t *testing.T) {
	e := newEnv(t)
	c := e.create(nil)
	p := e.process(c, false)
	yes := true
	req := bash("cat")
	req.Stdin = &yes
	st, _ := p.Start(t.Context(), connect.NewRequest(req))
	sel := started(t, st)
	in := p.StreamInput(t.Context())
	for _, m := range []*pb.StreamInputRequest{
		{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: sel}}},
		{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("a")}}}}},
		{Event: &pb.StreamInputRequest_Keepalive{Keepalive: &pb.StreamInputRequest_KeepAlive{}}},
		{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("b\n")}}}}},
	} {
		if err := in.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := in.CloseAndReceive(); err != nil {
		t.Fatal(err)
	}
	p.CloseStdin(t.Context(), connect.NewRequest(&pb.CloseStdinRequest{Process: sel}))
	evs, err := collect(st)
	if err != nil {
		t.Fatal(err)
	}
	if out := stdoutOf(evs); out != "ab\n" {
		t.Fatalf("stdout %q", out)
	}
	// Data before start is refused.
	in = p.StreamInput(t.Context())
	_ = in.Send(&pb.StreamInputRequest{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("a")}}}}})
	if _, err := in.CloseAndReceive(); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("data before start: %v", err)
	}
}

func TestShellFallback(t *testing.T) {
	e := newEnv(t)
	// bash sets BASH; the busybox image has no bash, so /bin/sh runs instead.
	for img, want := range map[string]string{"busybox": "sh\n", "debian": "/bin/bash\n"} {
		c := e.create(map[string]any{"templateID": img})
		st, _ := e.process(c, true).Start(t.Context(), connect.NewRequest(bash("echo ${BASH:-sh}")))
		evs, err := collect(st)
		if err != nil || stdoutOf(evs) != want {
			t.Fatalf("%s: %q %v", img, stdoutOf(evs), err)
		}
	}
}
