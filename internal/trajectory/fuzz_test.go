package trajectory

import (
	"encoding/base64"
	"strconv"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"

	"github.com/dsec-dev/dsec/pkg/api"
)

func FuzzParseHeaders(f *testing.F) {
	for _, s := range [][2]string{{"t1", "1"}, {"", ""}, {"t", ""}, {"", "3"}, {"a b", "1"}, {"x", "0"},
		{"x", "+1"}, {"x", " 1"}, {"x", "1073741824"}, {"x", "1073741825"}, {"x", "99999999999999999999"}, {"é", "2"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, traj, step string) {
		id, n, ok, err := ParseHeaders(traj, step)
		if err != nil {
			if ok {
				t.Fatal("ok with an error")
			}
			if errdefs.CodeOf(err) != api.CodeInvalidArgument {
				t.Fatalf("error is not invalid_argument: %v", err)
			}
			return
		}
		if !ok {
			if traj != "" || step != "" {
				t.Fatalf("not ok without error for %q %q", traj, step)
			}
			return
		}
		if id != traj || n < 1 || n > MaxStep || strconv.Itoa(n) != trimZeros(step) || ValidateID(id) != nil {
			t.Fatalf("parsed %q %q as %q %d", traj, step, id, n)
		}
	})
}

func trimZeros(s string) string {
	for len(s) > 1 && s[0] == '0' {
		s = s[1:]
	}
	return s
}

func FuzzFingerprint(f *testing.F) {
	f.Add("echo hi", "", "/root", "", "K", "V", int64(0), int64(0), "", "in", false)
	f.Add("", "ls", "/tmp/../root//", "root", "A", "", int64(60000), int64(1<<20), "utf8", "", true)
	f.Fuzz(func(t *testing.T, shell, arg, cwd, user, k, v string, timeout, maxOut int64, enc, stdin string, b64 bool) {
		req := api.ExecRequest{Shell: shell, Cwd: cwd, User: user, TimeoutMs: timeout, MaxOutputBytes: maxOut, OutputEncoding: enc}
		if arg != "" {
			req.Cmd = []string{arg}
		}
		if k != "" {
			req.Env = map[string]string{k: v, k + "2": v}
		}
		if b64 {
			req.StdinBase64 = base64.StdEncoding.EncodeToString([]byte(stdin))
		} else {
			req.Stdin = stdin
		}
		fp1, a1, err := Fingerprint(OpExec, NormalizeExec(OpExec, req))
		if err != nil {
			t.Skip() // invalid UTF-8 etc. is still marshalled; only real failures skip
		}
		// Spelling the defaults out, and either stdin encoding, is the same step.
		spelled := req
		n := NormalizeExec(OpExec, req)
		spelled.User, spelled.TimeoutMs, spelled.MaxOutputBytes, spelled.OutputEncoding = n.User, n.TimeoutMs, n.MaxOutputBytes, n.OutputEncoding
		spelled.Cwd = n.Cwd
		spelled.Stdin, spelled.StdinBase64 = "", ""
		if b64 {
			spelled.Stdin = stdin
		} else if stdin != "" {
			spelled.StdinBase64 = base64.StdEncoding.EncodeToString([]byte(stdin))
		}
		if len(req.Env) > 0 { // a copy of the map in another insertion order
			spelled.Env = map[string]string{k + "2": v, k: v}
		}
		fp2, a2, _ := Fingerprint(OpExec, NormalizeExec(OpExec, spelled))
		if fp1 != fp2 {
			t.Fatalf("normalisation is not stable:\n%s\n%s", a1, a2)
		}
		// The op is part of the fingerprint.
		if fp3, _, _ := Fingerprint(OpStartProcess, NormalizeExec(OpExec, req)); fp3 == fp1 {
			t.Fatal("op not part of the fingerprint")
		}
		// Any change of the command changes it.
		changed := req
		changed.Shell += "x"
		if fp4, _, _ := Fingerprint(OpExec, NormalizeExec(OpExec, changed)); fp4 == fp1 {
			t.Fatal("a changed command kept its fingerprint")
		}
	})
}

// FuzzOutcome: a stored result in either format decodes to an Outcome or an
// error, never a panic; a typed result round-trips.
func FuzzOutcome(f *testing.F) {
	for _, c := range []struct {
		op     string
		format int
		status int
		body   string
	}{
		{OpExec, FormatHTTP, 200, `{"exit_code":0,"stdout":"one\n"}`},
		{OpExecStream, FormatHTTP, 200, `{"type":"started","pid":3}` + "\n" + `{"type":"stdout","data":"aGk="}` + "\n" + `{"type":"exit","result":{"exit_code":0}}` + "\n"},
		{OpExecStream, FormatHTTP, 200, `{"type":"error","error":{"code":"internal"}}`},
		{OpRemove, FormatHTTP, 404, `{"error":{"code":"not_found","message":"x"}}`},
		{OpReadFile, FormatHTTP, 200, "bytes"},
		{OpHTTP, FormatHTTP, 502, ""},
		{OpExec, FormatTyped, 0, `{"exec":{"exit_code":3}}`},
		{"bogus", FormatHTTP, 200, "{}"},
	} {
		f.Add(c.op, c.format, c.status, []byte(c.body))
	}
	f.Fuzz(func(t *testing.T, op string, format, status int, body []byte) {
		r := Result{Format: format, Status: status, Body: body, Header: map[string]string{"X-Dsec-Mode": "0644"}}
		o, err := r.Outcome(op)
		if err != nil {
			return
		}
		_ = StepView(Step{Op: op, Result: &r})
		enc, err := TypedResult(o)
		if err != nil {
			t.Fatalf("encoding a decoded outcome: %v", err)
		}
		if _, err := enc.Outcome(op); err != nil {
			t.Fatalf("typed result does not decode: %v", err)
		}
	})
}
