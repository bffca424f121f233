package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/pkg/api"
)

// A create's start command (api.CreateSandboxRequest.StartCmd, Entrypoint):
// the node starts it as a background process once the sandbox exists and,
// with a readiness check, answers the create only when the check passes. A
// start that fails keeps the sandbox (and the process, if it still runs) for
// inspection and answers start_failed; the sandbox's Start says why.

const (
	// readyPollFirst and readyPollMax bound the wait between two readiness
	// checks (it doubles from the first to the max).
	readyPollFirst = 10 * time.Millisecond
	readyPollMax   = 250 * time.Millisecond
	// readyCheckMax bounds one run of ready_cmd and one connection attempt.
	readyCheckMax = 10 * time.Second
	// startTailBytes is how much of each of the command's output streams a
	// start_failed error quotes (the end of it).
	startTailBytes = 2048
)

// startArgv returns the command a create starts (nil for none): start_cmd
// through the shell, or the image's Entrypoint and Cmd.
func startArgv(req api.CreateSandboxRequest, cfg *image.Config) []string {
	switch {
	case req.StartCmd != "":
		return []string{"/bin/sh", "-c", req.StartCmd}
	case req.Entrypoint && cfg != nil:
		return append(slices.Clone(cfg.Entrypoint), cfg.Cmd...)
	}
	return nil
}

// checkEntrypoint refuses entrypoint: true on an image that has neither an
// Entrypoint nor a Cmd (before anything is created).
func checkEntrypoint(req api.CreateSandboxRequest, img image.Image) error {
	if req.Entrypoint && len(startArgv(req, img.Config)) == 0 {
		return errdefs.Invalid("entrypoint: image %q has neither an Entrypoint nor a Cmd in its config", img.Name)
	}
	return nil
}

// start runs req's start command in sb and waits for its readiness check;
// it does nothing when req has no start command. A failure is start_failed
// (ctx ending first: deadline_exceeded), with sb kept.
func (m *Manager) start(ctx context.Context, sb *sandbox, req api.CreateSandboxRequest) error {
	sb.mu.Lock()
	id, argv := sb.rec.ID, startArgv(req, sb.rec.ImageConfig)
	sb.mu.Unlock()
	if argv == nil {
		return nil
	}
	kind := "start_cmd"
	if req.Entrypoint {
		kind = "entrypoint"
	}
	st := &api.StartStatus{State: api.StartStarting, Cmd: argv}
	p, err := m.StartProcess(ctx, id, api.ExecRequest{Cmd: argv, Labels: map[string]string{api.LabelStart: kind}})
	if err != nil {
		return m.startFailed(sb, id, st, fmt.Sprintf("the %s %q could not be started: %v", kind, argv, err), "")
	}
	st.ProcessID = p.ID
	if req.ReadyCmd == "" && req.ReadyPort == 0 {
		st.State = api.StartStarted
		return m.setStart(sb, st)
	}
	if err := m.setStart(sb, st); err != nil {
		return err
	}
	why, err := m.waitReady(ctx, sb, id, p.ID, req)
	if errors.Is(err, errSandboxGone) {
		return api.NewError(api.CodeStartFailed, "sandbox %s: deleted before its %s was ready", id, kind)
	}
	if err != nil {
		if ctx.Err() != nil {
			_ = m.startFailed(sb, id, st, "create ended before the start command was ready: "+ctx.Err().Error(), p.ID)
			return errdefs.Wrap(api.CodeDeadlineExceeded, ctx.Err(), "sandbox %s: waiting for the %s to be ready (the sandbox is kept)", id, kind)
		}
		return m.startFailed(sb, id, st, fmt.Sprintf("the %s %q %s", kind, argv, why), p.ID)
	}
	st.State = api.StartReady
	return m.setStart(sb, st)
}

// errNotReady is waitReady's failure; the reason says why. errSandboxGone:
// the sandbox was deleted (or reset away) while create waited.
var (
	errNotReady    = errors.New("not ready")
	errSandboxGone = errors.New("sandbox gone")
)

// waitReady checks req's readiness until it passes, the start process procID
// fails (ends with a non-zero status: one that exits 0 may have left a
// daemon behind, and the check goes on), the ready timeout passes, or ctx
// ends. On failure it returns what happened.
func (m *Manager) waitReady(ctx context.Context, sb *sandbox, id, procID string, req api.CreateSandboxRequest) (string, error) {
	timeout := req.ReadyTimeout()
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sb.mu.Lock()
	bp := sb.procs[procID]
	sb.mu.Unlock()
	if bp == nil {
		return "is gone (its sandbox was reset or deleted)", errNotReady
	}
	done := bp.done
	wait := readyPollFirst
	t := time.NewTimer(0)
	defer t.Stop()
	last := "no readiness check ran"
	for {
		select {
		case <-done:
			if sb.gone() {
				return "", errSandboxGone
			}
			if res := bp.view().Result; res != nil && (res.ExitCode != 0 || res.Signal != "") {
				return "ended before it was ready: " + describeExit(*res), errNotReady
			}
			done = nil // exited 0: a daemon may be starting
		case <-rctx.Done():
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			return fmt.Sprintf("was not ready within %s (last check: %s)", timeout, last), errNotReady
		case <-t.C:
			ok, why := m.readyOnce(rctx, id, req)
			if ok {
				return "", nil
			}
			last = why
			if sb.gone() {
				return "", errSandboxGone
			}
			t.Reset(wait)
			wait = min(2*wait, readyPollMax)
		}
	}
}

// readyOnce runs req's readiness checks once: the port accepts a
// connection, then ready_cmd exits 0. It says why not.
func (m *Manager) readyOnce(ctx context.Context, id string, req api.CreateSandboxRequest) (bool, string) {
	if req.ReadyPort != 0 {
		dctx, cancel := context.WithTimeout(ctx, readyCheckMax)
		c, err := m.Dial(dctx, id, req.ReadyPort)
		cancel()
		if err != nil {
			return false, fmt.Sprintf("ready_port %d: %v", req.ReadyPort, err)
		}
		c.Close()
	}
	if req.ReadyCmd != "" {
		left := readyCheckMax
		if d, ok := ctx.Deadline(); ok {
			left = min(left, time.Until(d))
		}
		if left <= 0 {
			return false, "ready_cmd: no time left"
		}
		res, err := m.exec(ctx, id, api.ExecRequest{Shell: req.ReadyCmd, TimeoutMs: max(left.Milliseconds(), 1),
			MaxOutputBytes: startTailBytes})
		switch {
		case err != nil:
			return false, fmt.Sprintf("ready_cmd: %v", err)
		case res.ExitCode != 0 || res.Signal != "":
			return false, fmt.Sprintf("ready_cmd %s%s", describeExit(res), outputOf(res.Stdout, res.Stderr))
		}
	}
	return true, ""
}

// gone reports whether sb was deleted (a Delete in progress holds sb.mu, so
// this waits for its end).
func (sb *sandbox) gone() bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.deleted
}

// describeExit says how a process ended.
func describeExit(r api.ExecResult) string {
	switch {
	case r.Error != "":
		return fmt.Sprintf("exit code %d (%s)", r.ExitCode, r.Error)
	case r.TimedOut:
		return "timed out"
	case r.Signal != "":
		return "killed by " + r.Signal
	}
	return fmt.Sprintf("exit code %d", r.ExitCode)
}

// outputOf formats the end of a command's output for an error message.
func outputOf(stdout, stderr string) string {
	var b strings.Builder
	for _, s := range []struct{ name, v string }{{"stdout", stdout}, {"stderr", stderr}} {
		if v := strings.TrimRight(s.v, "\n"); v != "" {
			fmt.Fprintf(&b, "\n--- %s ---\n%s", s.name, v)
		}
	}
	return b.String()
}

// startFailed records the failure on sb and returns it as start_failed, with
// the end of the start process's output.
func (m *Manager) startFailed(sb *sandbox, id string, st *api.StartStatus, why, procID string) error {
	st.State, st.Error = api.StartFailed, why
	if err := m.setStart(sb, st); err != nil {
		m.log.Warn("recording a failed start command", "id", id, "err", err)
	}
	msg := fmt.Sprintf("sandbox %s: %s; the sandbox is kept for inspection (delete it when done)", id, why)
	if procID != "" {
		msg += fmt.Sprintf(" [process %s]", procID) + outputOf(m.logTail(id, procID, "stdout"), m.logTail(id, procID, "stderr"))
	}
	return api.NewError(api.CodeStartFailed, "%s", msg)
}

// setStart records the start status on sb (kept across a restart).
func (m *Manager) setStart(sb *sandbox, st *api.StartStatus) error {
	c := *st
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.deleted {
		return nil // its record is gone, and must stay gone
	}
	sb.rec.Start = &c
	return sb.save()
}

// logTail returns the last startTailBytes of a background process's log.
func (m *Manager) logTail(id, procID, stream string) string {
	f, err := os.Open(m.logPath(id, procID, stream))
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > startTailBytes {
		if _, err := f.Seek(fi.Size()-startTailBytes, io.SeekStart); err != nil {
			return ""
		}
	}
	b, _ := io.ReadAll(io.LimitReader(f, startTailBytes))
	return strings.ToValidUTF8(string(b), "\uFFFD")
}
