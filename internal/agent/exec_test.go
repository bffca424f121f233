package agent_test

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

func TestExec(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, nil)
	sb := create(t, m, api.CreateSandboxRequest{Env: map[string]string{"FROM_CREATE": "c", "OVERRIDE": "create"}})
	id := sb.ID

	t.Run("Basics", func(t *testing.T) {
		res := execOK(t, m, id, api.ExecRequest{Cmd: []string{"echo", "hi"}})
		if res.ExitCode != 0 || res.Stdout != "hi\n" || res.Stderr != "" || res.TimedOut || res.Signal != "" {
			t.Errorf("echo hi: %+v", res)
		}
		res = execOK(t, m, id, api.ExecRequest{Shell: "echo $FROM_CREATE $OVERRIDE $HOME $(pwd); exit 3",
			Env: map[string]string{"OVERRIDE": "request"}})
		if res.ExitCode != 3 || res.Stdout != "c request /root /root\n" {
			t.Errorf("env, default cwd and exit code: %+v", res)
		}
		res = execOK(t, m, id, api.ExecRequest{Cmd: []string{"no-such-command"}})
		if res.ExitCode != 127 || res.Error == "" || !strings.HasPrefix(res.Stderr, "dsec: ") {
			t.Errorf("missing command: %+v", res)
		}
		res = execOK(t, m, id, api.ExecRequest{Shell: "kill -TERM $$"})
		if res.ExitCode != -1 || res.Signal != "SIGTERM" {
			t.Errorf("signalled: %+v", res)
		}
	})

	t.Run("OutputLimit", func(t *testing.T) {
		res := execOK(t, m, id, api.ExecRequest{Shell: "printf 0123456789; printf abcdefghij >&2", MaxOutputBytes: 10})
		if res.Stdout != "0123456789" || res.StdoutTruncated || res.Stderr != "abcdefghij" || res.StderrTruncated {
			t.Errorf("output of exactly the limit: %+v", res)
		}
		res = execOK(t, m, id, api.ExecRequest{Shell: "printf 0123456789X; printf abcdefghijY >&2", MaxOutputBytes: 10})
		if res.Stdout != "0123456789" || !res.StdoutTruncated || res.Stderr != "abcdefghij" || !res.StderrTruncated {
			t.Errorf("output one byte over the limit: %+v", res)
		}
		// The command is not disturbed by the cut: it writes all 4 MiB and exits 0.
		res = execOK(t, m, id, api.ExecRequest{Shell: "head -c 4194304 /dev/zero"})
		if res.ExitCode != 0 || len(res.Stdout) != 1<<20 || !res.StdoutTruncated || res.Stderr != "" {
			t.Errorf("4 MiB at the default 1 MiB limit: exit %d, %d bytes, truncated %v, stderr %q",
				res.ExitCode, len(res.Stdout), res.StdoutTruncated, res.Stderr)
		}
		_, err := validated(m).Exec(ctxT(t), id, api.ExecRequest{Cmd: []string{"true"}, MaxOutputBytes: -1})
		wantCode(t, "negative max_output_bytes", err, api.CodeInvalidArgument)
	})

	t.Run("Timeout", func(t *testing.T) {
		t0 := time.Now()
		res := execOK(t, m, id, api.ExecRequest{
			Shell:     "echo $$ > /tmp/t-sh; sleep 30 & echo $! > /tmp/t-bg; wait",
			TimeoutMs: 500,
		})
		if d := time.Since(t0); d > 5*time.Second {
			t.Errorf("a 500ms timeout returned after %v", d)
		}
		if !res.TimedOut || res.Signal != "SIGKILL" || res.ExitCode != -1 {
			t.Errorf("timed out exec: %+v", res)
		}
		// Both the shell and its child are gone.
		for _, f := range []string{"/tmp/t-sh", "/tmp/t-bg"} {
			waitFor(t, 5*time.Second, "process of "+f+" to be gone", func() bool {
				r := execOK(t, m, id, api.ExecRequest{Shell: `kill -0 "$(cat ` + f + `)"`})
				return r.ExitCode != 0
			})
		}
		_, err := validated(m).Exec(ctxT(t), id, api.ExecRequest{Cmd: []string{"true"}, TimeoutMs: -1})
		wantCode(t, "negative timeout", err, api.CodeInvalidArgument)
	})

	t.Run("Stdin", func(t *testing.T) {
		res := execOK(t, m, id, api.ExecRequest{Cmd: []string{"cat"}, Stdin: "hello\nworld\n"})
		if res.ExitCode != 0 || res.Stdout != "hello\nworld\n" {
			t.Errorf("stdin: %+v", res)
		}
		big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB, more than a pipe holds
		res = execOK(t, m, id, api.ExecRequest{Shell: "sleep 0.2; wc -c", Stdin: big})
		if res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "1048576" {
			t.Errorf("1 MiB of stdin to a late reader: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
		}
		// No stdin: the process reads EOF at once instead of hanging.
		res = execOK(t, m, id, api.ExecRequest{Cmd: []string{"cat"}, TimeoutMs: 5000})
		if res.TimedOut || res.ExitCode != 0 || res.Stdout != "" {
			t.Errorf("cat without stdin: %+v", res)
		}
		_, err := validated(m).Exec(ctxT(t), id, api.ExecRequest{Cmd: []string{"cat"}, Stdin: "a", StdinBase64: "Yg=="})
		wantCode(t, "stdin and stdin_base64", err, api.CodeInvalidArgument)
	})

	t.Run("DaemonHoldingStdout", func(t *testing.T) {
		t0 := time.Now()
		res := execOK(t, m, id, api.ExecRequest{Shell: "sleep 30 & echo ok"})
		if d := time.Since(t0); d > 1500*time.Millisecond {
			t.Errorf("exec whose daemon keeps stdout open returned after %v", d)
		}
		if res.ExitCode != 0 || res.Stdout != "ok\n" || res.TimedOut {
			t.Errorf("daemonizing exec: %+v", res)
		}
	})

	t.Run("Base64", func(t *testing.T) {
		all := make([]byte, 256)
		for i := range all {
			all[i] = byte(i)
		}
		res := execOK(t, m, id, api.ExecRequest{Cmd: []string{"cat"},
			StdinBase64: base64.StdEncoding.EncodeToString(all), OutputEncoding: "base64"})
		got, err := base64.StdEncoding.DecodeString(res.Stdout)
		if err != nil || !bytes.Equal(got, all) || res.OutputEncoding != "base64" {
			t.Errorf("binary round trip: encoding %q, %d bytes back, err %v", res.OutputEncoding, len(got), err)
		}
		// utf8 (the default) replaces invalid bytes instead of failing.
		res = execOK(t, m, id, api.ExecRequest{Shell: `printf 'a\377b'`})
		if res.Stdout != "a\uFFFDb" {
			t.Errorf("invalid utf8 output = %q", res.Stdout)
		}
		_, err = validated(m).Exec(ctxT(t), id, api.ExecRequest{Cmd: []string{"true"}, OutputEncoding: "hex"})
		wantCode(t, "unknown output encoding", err, api.CodeInvalidArgument)
		_, err = validated(m).Exec(ctxT(t), id, api.ExecRequest{Cmd: []string{"cat"}, StdinBase64: "!!"})
		wantCode(t, "bad stdin_base64", err, api.CodeInvalidArgument)
	})

	t.Run("User", func(t *testing.T) {
		res := execOK(t, m, id, api.ExecRequest{Shell: "id -u; id -g", User: "nobody"})
		if res.ExitCode != 0 || res.Stdout != "65534\n65534\n" {
			t.Errorf("user nobody: %+v", res)
		}
		res = execOK(t, m, id, api.ExecRequest{Shell: "id -u; id -g; pwd", User: "1000:1001"})
		if res.ExitCode != 0 || res.Stdout != "1000\n1001\n/\n" {
			t.Errorf("user 1000:1001: %+v", res)
		}
		res = execOK(t, m, id, api.ExecRequest{Shell: "touch /root/x", User: "nobody"})
		if res.ExitCode == 0 {
			t.Errorf("nobody could write /root")
		}
		_, err := m.Exec(ctxT(t), id, api.ExecRequest{Cmd: []string{"true"}, User: "no-such-user"})
		wantCode(t, "unknown user", err, api.CodeInvalidArgument)
	})

	t.Run("Cwd", func(t *testing.T) {
		res := execOK(t, m, id, api.ExecRequest{Cmd: []string{"pwd"}, Cwd: "/tmp"})
		if res.Stdout != "/tmp\n" {
			t.Errorf("cwd /tmp: %+v", res)
		}
		_, err := m.Exec(ctxT(t), id, api.ExecRequest{Cmd: []string{"pwd"}, Cwd: "tmp"})
		wantCode(t, "relative cwd", err, api.CodeInvalidArgument)
		_, err = m.StartProcess(ctxT(t), id, api.ExecRequest{Cmd: []string{"pwd"}, Cwd: "tmp"})
		wantCode(t, "relative cwd (background)", err, api.CodeInvalidArgument)
	})

	t.Run("Validation", func(t *testing.T) {
		for name, req := range map[string]api.ExecRequest{
			"no command":    {},
			"cmd and shell": {Cmd: []string{"true"}, Shell: "true"},
			"empty argv0":   {Cmd: []string{""}},
			"NUL in arg":    {Cmd: []string{"echo", "a\x00b"}},
			"bad env name":  {Cmd: []string{"true"}, Env: map[string]string{"A=B": "c"}},
		} {
			_, err := validated(m).Exec(ctxT(t), id, req)
			wantCode(t, name, err, api.CodeInvalidArgument)
		}
		_, err := m.Exec(ctxT(t), "sb-nonexistent", api.ExecRequest{Cmd: []string{"true"}})
		wantCode(t, "unknown sandbox", err, api.CodeNotFound)
	})
}
