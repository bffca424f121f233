package agent

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

const (
	defaultExecTimeout = 60 * time.Second
	defaultMaxOutput   = 1 << 20
	defaultPath        = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

var _ session.Service = (*Manager)(nil)

// procSpec turns an API exec request (checked by session.Validating) into a
// driver process spec.
func (sb *sandbox) procSpec(inst driver.Instance, req api.ExecRequest, tag string) (driver.ProcSpec, error) {
	args := req.Cmd
	if req.Shell != "" {
		args = []string{"/bin/sh", "-c", req.Shell}
	}
	// The image's config gives the defaults; the request overrides them.
	ic := sb.rec.ImageConfig
	uid, gid, home, err := sb.resolveUser(inst, ic.ExecUser(req.User))
	if err != nil {
		return driver.ProcSpec{}, err
	}
	cwd := ic.ExecCwd(req.Cwd, home)
	if !path.IsAbs(cwd) || strings.IndexByte(cwd, 0) >= 0 {
		return driver.ProcSpec{}, errdefs.Invalid("cwd must be an absolute path")
	}
	env := map[string]string{"PATH": defaultPath, "HOME": home, "HOSTNAME": sb.rec.ID, "TERM": "xterm", "LANG": "C.UTF-8"}
	if uid == 0 {
		env["USER"] = "root"
	}
	ic.ExecEnv(env)
	for k, v := range sb.rec.Env {
		env[k] = v
	}
	for k, v := range req.Env {
		env[k] = v
	}
	envv := make([]string, 0, len(env))
	for k, v := range env {
		envv = append(envv, k+"="+v)
	}
	sort.Strings(envv)
	tty, err := sb.ttySize(req)
	if err != nil {
		return driver.ProcSpec{}, err
	}
	return driver.ProcSpec{Args: args, Env: envv, Cwd: cwd, UID: uid, GID: gid, Tag: tag, TTY: tty}, nil
}

// ttySize is a request's terminal (session.TermSizeOf: 80x24 when no size is
// given), checking that the backend has the TTY capability.
func (sb *sandbox) ttySize(req api.ExecRequest) (*api.TermSize, error) {
	ts, err := session.TermSizeOf(req)
	if err != nil || !req.TTY {
		return nil, err
	}
	if !sb.drv.Capabilities().TTY {
		return nil, errdefs.Invalid("backend %q has no terminals (tty): its capabilities lack TTY", sb.rec.Backend)
	}
	return &ts, nil
}

// resolveUser maps "", "root", "UID", "UID:GID" or a user name (looked up in the
// sandbox's /etc/passwd) to ids and a home directory.
func (sb *sandbox) resolveUser(inst driver.Instance, user string) (uid, gid int, home string, err error) {
	if user == "" || user == "root" || user == "0" || user == "0:0" {
		return 0, 0, "/root", nil
	}
	u, g, hasG := strings.Cut(user, ":")
	if n, err := strconv.Atoi(u); err == nil && n >= 0 {
		uid, gid = n, n
		if hasG {
			if gid, err = strconv.Atoi(g); err != nil || gid < 0 {
				return 0, 0, "", errdefs.Invalid("invalid group in user %q", user)
			}
		}
		return uid, gid, "/", nil
	}
	ctx := context.Background()
	fs, err := inst.FS(ctx)
	if err != nil {
		return 0, 0, "", err
	}
	defer fs.Close()
	r, _, err := fs.Open(ctx, "/etc/passwd")
	if err != nil {
		return 0, 0, "", errdefs.Invalid("user %q: cannot read /etc/passwd in the sandbox", user)
	}
	defer r.Close()
	sc := bufio.NewScanner(io.LimitReader(r, 4<<20))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) >= 6 && f[0] == u {
			uid, err1 := strconv.Atoi(f[2])
			gid, err2 := strconv.Atoi(f[3])
			if err1 != nil || err2 != nil {
				break
			}
			if hasG {
				if gid, err = strconv.Atoi(g); err != nil {
					return 0, 0, "", errdefs.Invalid("invalid group in user %q", user)
				}
			}
			home := f[5]
			if _, err := fs.Stat(ctx, home); home == "" || err != nil {
				// Like login(1): no home directory (nobody's is /nonexistent)
				// means HOME=/ rather than a chdir failure on every exec.
				home = "/"
			}
			return uid, gid, home, nil
		}
	}
	return 0, 0, "", errdefs.Invalid("user %q not found in the sandbox's /etc/passwd", user)
}

// stdinBytes is a request's initial stdin (checked by session.Validating).
func stdinBytes(req api.ExecRequest) ([]byte, error) {
	if req.StdinBase64 != "" {
		b, err := base64.StdEncoding.DecodeString(req.StdinBase64)
		if err != nil {
			return nil, errdefs.Invalid("stdin_base64: %v", err)
		}
		return b, nil
	}
	return []byte(req.Stdin), nil
}

// limitedBuffer keeps the first max bytes written and counts the rest.
type limitedBuffer struct {
	buf       []byte
	max       int
	truncated bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - len(b.buf); room > 0 {
		if len(p) > room {
			b.buf = append(b.buf, p[:room]...)
			b.truncated = true
		} else {
			b.buf = append(b.buf, p...)
		}
	} else if len(p) > 0 {
		b.truncated = true
	}
	return len(p), nil
}

func encodeOutput(b []byte, enc string) string {
	if enc == "base64" {
		return base64.StdEncoding.EncodeToString(b)
	}
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// run starts a process and pumps its I/O: stdin from in (may be nil), output to
// out[0] and out[1] (with a TTY, all of it to out[0]). ctl delivers signals and
// resizes. It returns when the process exited and output was drained.
func (sb *sandbox) run(ctx context.Context, inst driver.Instance, spec driver.ProcSpec, in io.Reader, out [2]io.Writer,
	timeout time.Duration, started func(int), ctl <-chan session.Control) (driver.Exit, bool, time.Duration, error) {
	t0 := time.Now()
	ctx, end := sb.m.phase(ctx, sb.rec.Backend, PhaseDriverExec, "driver.exec")
	var err error
	defer func() { end(err) }()
	var g *startGate
	if started != nil {
		// The driver copies output from inside Exec on: started goes first.
		g, out = gate(out)
	}
	pr, err := inst.Exec(ctx, spec, driver.Stdio{Stdin: in, Stdout: out[0], Stderr: out[1]})
	if err != nil {
		if g != nil {
			g.abandon()
		}
		return driver.Exit{}, false, 0, err
	}
	defer pr.Close()
	if g != nil {
		g.start(pr.PID(), started)
	}
	var timedOut bool
	var timer <-chan time.Time
	if timeout > 0 {
		tm := time.NewTimer(timeout)
		defer tm.Stop()
		timer = tm.C
	}
	waitCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	type res struct {
		ex  driver.Exit
		err error
	}
	done := make(chan res, 1)
	go func() {
		ex, err := pr.Wait(waitCtx)
		done <- res{ex, err}
	}()
	var r res
loop:
	for {
		select {
		case r = <-done:
			break loop
		case <-timer:
			timedOut = true
			timer = nil
			_ = pr.Signal(int(unix.SIGKILL))
		case c, ok := <-ctl:
			if !ok {
				ctl = nil // closed: no more control messages
				continue
			}
			sb.control(ctx, pr, c)
		case <-ctx.Done():
			// The client went away: end the command rather than leave it running
			// unobserved.
			_ = pr.Signal(int(unix.SIGKILL))
			ctx = context.Background()
		}
	}
	if sb.gone() {
		// Killed by its sandbox's deletion (or ended as it began).
		err = errDeletedWhileRunning(sb.rec.ID, "the command")
		return driver.Exit{}, timedOut, time.Since(t0), err
	}
	if r.err != nil {
		err = errdefs.Internal(r.err, "wait for process")
		return driver.Exit{}, timedOut, time.Since(t0), err
	}
	return r.ex, timedOut, time.Since(t0), nil
}

// control applies one control message to a running process.
func (sb *sandbox) control(ctx context.Context, pr driver.Proc, c session.Control) {
	switch {
	case c.Signal != 0:
		if err := pr.Signal(c.Signal); err != nil {
			sb.m.log.Debug("signal exec", "id", sb.rec.ID, "signal", c.Signal, "err", err)
		}
	case c.Resize != nil:
		if err := pr.Resize(c.Resize.Cols, c.Resize.Rows); err != nil {
			sb.m.log.Debug("resize exec", "id", sb.rec.ID, "err", err)
		}
	}
}

func result(ex driver.Exit, timedOut bool, dur time.Duration) api.ExecResult {
	res := api.ExecResult{ExitCode: ex.Code, TimedOut: timedOut, OOMKilled: ex.OOMKilled,
		DurationMs: float64(dur.Microseconds()) / 1000, Error: ex.StartErr}
	if ex.Signal != 0 {
		res.Signal = unix.SignalName(unix.Signal(ex.Signal))
		if res.Signal == "" {
			res.Signal = fmt.Sprintf("signal %d", ex.Signal)
		}
	}
	return res
}

// Exec implements session.Service.
func (m *Manager) Exec(ctx context.Context, id string, req api.ExecRequest) (api.ExecResult, error) {
	m.busy()
	defer m.busy()
	ctx, end := m.span(ctx, "agent.exec", "")
	res, err := m.exec(ctx, id, req)
	end(err)
	return res, err
}

func (m *Manager) exec(ctx context.Context, id string, req api.ExecRequest) (api.ExecResult, error) {
	if req.TTY || req.Cols != 0 || req.Rows != 0 {
		return api.ExecResult{}, errdefs.Invalid("tty needs a streaming exec or a background process, not a blocking exec")
	}
	sb, inst, err := m.session(id)
	if err != nil {
		return api.ExecResult{}, err
	}
	spec, err := sb.procSpec(inst, req, "")
	if err != nil {
		return api.ExecResult{}, err
	}
	stdin, err := stdinBytes(req)
	if err != nil {
		return api.ExecResult{}, err
	}
	max := int(req.MaxOutputBytes)
	if max == 0 {
		max = defaultMaxOutput
	}
	timeout := time.Duration(req.TimeoutMs) * time.Millisecond
	if timeout == 0 {
		timeout = defaultExecTimeout
	}
	var in io.Reader
	if len(stdin) > 0 {
		in = strings.NewReader(string(stdin))
	}
	stdout, stderr := &limitedBuffer{max: max}, &limitedBuffer{max: max}
	ex, timedOut, dur, err := sb.run(ctx, inst, spec, in, [2]io.Writer{stdout, stderr}, timeout, nil, nil)
	sb.touch()
	if err != nil {
		return api.ExecResult{}, err
	}
	res := result(ex, timedOut, dur)
	res.Stdout, res.Stderr = encodeOutput(stdout.buf, req.OutputEncoding), encodeOutput(stderr.buf, req.OutputEncoding)
	if ex.StartErr != "" && len(stderr.buf) == 0 {
		res.Stderr = "dsec: " + ex.StartErr + "\n"
	}
	res.StdoutTruncated, res.StderrTruncated = stdout.truncated, stderr.truncated
	if req.OutputEncoding == "base64" {
		res.OutputEncoding = "base64"
	}
	return res, nil
}

// ExecStream implements session.Service.
func (m *Manager) ExecStream(ctx context.Context, id string, req api.ExecRequest, sio session.Stream) (api.ExecResult, error) {
	m.busy()
	defer m.busy()
	ctx, end := m.span(ctx, "agent.exec_stream", "")
	res, err := m.execStream(ctx, id, req, sio)
	end(err)
	return res, err
}

func (m *Manager) execStream(ctx context.Context, id string, req api.ExecRequest, sio session.Stream) (api.ExecResult, error) {
	sb, inst, err := m.session(id)
	if err != nil {
		return api.ExecResult{}, err
	}
	spec, err := sb.procSpec(inst, req, "")
	if err != nil {
		return api.ExecResult{}, err
	}
	in := sio.Stdin
	if in == nil && (req.Stdin != "" || req.StdinBase64 != "") {
		b, err := stdinBytes(req)
		if err != nil {
			return api.ExecResult{}, err
		}
		in = strings.NewReader(string(b))
	}
	out := [2]io.Writer{discardIfNil(sio.Stdout), discardIfNil(sio.Stderr)}
	ex, timedOut, dur, err := sb.run(ctx, inst, spec, in, out, time.Duration(req.TimeoutMs)*time.Millisecond, sio.Started, sio.Control)
	sb.touch()
	if err != nil {
		return api.ExecResult{}, err
	}
	res := result(ex, timedOut, dur)
	if ex.StartErr != "" {
		w := sio.Stderr
		if spec.TTY != nil {
			w = sio.Stdout
		}
		if w != nil {
			_, _ = io.WriteString(w, "dsec: "+ex.StartErr+"\n")
		}
	}
	return res, nil
}

func discardIfNil(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
