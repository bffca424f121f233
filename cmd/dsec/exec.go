package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// execOptions are the flags `dsec exec` and `dsec shell` share.
type execOptions struct {
	env              []string
	cwd, user        string
	timeout          string
	traj             string
	step             int
	interactive, tty bool
	size             string // COLSxROWS
}

func (o *execOptions) addCommon(f *pflag.FlagSet) {
	f.StringArrayVarP(&o.env, "env", "e", nil, "KEY=VALUE (repeatable)")
	f.StringVarP(&o.cwd, "workdir", "w", "", "working directory inside the sandbox")
	f.StringVarP(&o.user, "user", "u", "", "user: root, a name, UID or UID:GID")
	f.StringVar(&o.size, "size", "", "terminal size COLSxROWS, e.g. 120x40 (default: the local terminal's, else 80x24)")
}

func execCmd() *cobra.Command {
	var o execOptions
	var shell bool
	c := &cobra.Command{
		Use:   "exec [-i] [-t] [--traj TRAJ --step N] ID -- CMD [ARGS...]",
		Short: "Run a command in a sandbox, streaming its output; exits with its exit code",
		Long: `Run a command in a sandbox, streaming its output; exits with its exit code.

-t runs the command on a terminal allocated in the sandbox (stdout and stderr
are then one stream), also when dsec's own input is not a terminal. With -i -t
from a terminal the session is interactive: the local terminal is in raw mode
(Ctrl-C goes to the sandbox's foreground job as a byte), and the sandbox's
terminal follows the local window size unless --size is given.

With --traj and --step the command is step N of trajectory TRAJ: the server logs
it, and a step it already finished is not run again: its logged output is printed
and dsec exits with its logged code.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := api.ExecRequest{}
			if shell {
				req.Shell = strings.Join(args[1:], " ")
			} else {
				req.Cmd = args[1:]
			}
			return runExec(cmd.Context(), args[0], req, o)
		},
	}
	f := c.Flags()
	o.addCommon(f)
	f.StringVar(&o.timeout, "timeout", "", "kill the command after this long, e.g. 30s")
	f.BoolVarP(&o.interactive, "interactive", "i", false, "forward standard input")
	f.BoolVarP(&o.tty, "tty", "t", false, "allocate a terminal in the sandbox")
	f.BoolVar(&shell, "shell", false, "join the arguments and run them with /bin/sh -c")
	f.StringVar(&o.traj, "traj", "", "trajectory ID: log the command as a step of it")
	f.IntVar(&o.step, "step", 0, "step number within --traj (1, 2, ...)")
	return c
}

func shellCmd() *cobra.Command {
	var o execOptions
	c := &cobra.Command{
		Use:   "shell ID",
		Short: "An interactive login shell in a sandbox (exec -it ID -- bash -l, or sh -l without bash)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.size != "" {
				if _, err := parseTermSize(o.size); err != nil {
					return err // before asking the sandbox anything
				}
			}
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			sh, err := loginShell(cmd.Context(), cl, args[0])
			if err != nil {
				return err
			}
			o.interactive, o.tty = true, true
			return runExecWith(cmd.Context(), execIn(cl, args[0]), api.ExecRequest{Cmd: []string{sh, "-l"}}, o)
		},
	}
	o.addCommon(c.Flags())
	return c
}

// loginShell asks the sandbox whether it has bash (a stat through the files API);
// sh otherwise.
func loginShell(ctx context.Context, cl *client.Client, id string) (string, error) {
	_, err := cl.Stat(ctx, id, "/bin/bash")
	if err == nil {
		return "bash", nil
	}
	if ae, ok := api.AsError(err); ok && ae.Code == api.CodeNotFound {
		return "sh", nil // or no such sandbox: the exec says so
	}
	return "", err
}

func runExec(ctx context.Context, id string, req api.ExecRequest, o execOptions) error {
	cl, err := client.FromEnv()
	if err != nil {
		return err
	}
	return runExecWith(ctx, execIn(cl, id), req, o)
}

// streamStarter starts a streaming exec of req (dsec exec: in a sandbox that
// exists; dsec run: in the sandbox the same request creates).
type streamStarter func(ctx context.Context, req api.ExecRequest, o client.StreamOptions) (*client.Stream, error)

// execIn starts streaming execs in sandbox id.
func execIn(cl *client.Client, id string) streamStarter {
	return func(ctx context.Context, req api.ExecRequest, o client.StreamOptions) (*client.Stream, error) {
		return cl.StartExecStream(ctx, id, req, o)
	}
}

// runExecWith runs req as the flags in o say and maps its result to dsec's
// exit status.
func runExecWith(ctx context.Context, start streamStarter, req api.ExecRequest, o execOptions) error {
	ctx, req, err := o.prepare(ctx, req)
	if err != nil {
		return err
	}
	ctx, sigs, stopSignals := forwardSignals(ctx)
	sopts := client.StreamOptions{Stdout: os.Stdout, Stderr: os.Stderr, Signals: sigs}
	err = execStreamed(ctx, start, req, o, sopts)
	gaveUp := ctx.Err() != nil // before stopSignals cancels it
	if sig := stopSignals(); sig != 0 && gaveUp {
		fmt.Fprintf(os.Stderr, "dsec: gave up on the command %v after %s (%v)\n", signalGrace, unix.SignalName(sig), err)
		return exitError{128 + int(sig)}
	}
	return err
}

// prepare fills req from the flags in o, or names the flag that is wrong.
func (o execOptions) prepare(ctx context.Context, req api.ExecRequest) (context.Context, api.ExecRequest, error) {
	req.Cwd, req.User = o.cwd, o.user
	env, err := parseEnv(o.env)
	if err != nil {
		return ctx, req, err
	}
	if env != nil {
		req.Env = env
	}
	if o.timeout != "" {
		d, err := time.ParseDuration(o.timeout)
		if err != nil || d <= 0 {
			return ctx, req, fmt.Errorf("invalid --timeout %q", o.timeout)
		}
		req.TimeoutMs = d.Milliseconds()
	}
	if (o.traj == "") != (o.step == 0) {
		return ctx, req, errors.New("--traj and --step go together")
	}
	if o.traj != "" {
		ctx = client.WithTrajectory(ctx, o.traj, o.step)
	}
	if o.size != "" {
		if !o.tty {
			return ctx, req, errors.New("--size needs -t")
		}
		if _, err := parseTermSize(o.size); err != nil {
			return ctx, req, err
		}
	}
	return ctx, req, nil
}

// execStreamed runs the streaming exec, with a terminal if o says so.
func execStreamed(ctx context.Context, start streamStarter, req api.ExecRequest, o execOptions, sopts client.StreamOptions) error {
	if o.interactive {
		sopts.Stdin = os.Stdin
	}
	if !o.tty {
		s, err := start(ctx, req, sopts)
		if err != nil {
			return err
		}
		res, err := s.Wait()
		if err != nil {
			return err
		}
		return exitFromResult(res)
	}

	lt := localTerminal()
	req.TTY = true
	follow := false
	switch {
	case o.size != "":
		sz, err := parseTermSize(o.size)
		if err != nil {
			return err
		}
		req.Cols, req.Rows = sz.Cols, sz.Rows
	case lt.ok():
		if sz, err := lt.size(); err == nil {
			sz = clampSize(sz)
			req.Cols, req.Rows = sz.Cols, sz.Rows
			follow = true
		}
	}
	sopts.OnInputError = func(e *api.Error) { fmt.Fprintf(os.Stderr, "dsec: %s\r\n", e.Message) }
	if o.interactive && lt.isStdin() {
		// Raw mode: keys (Ctrl-C, Ctrl-Z, Ctrl-D included) go to the sandbox's
		// terminal as bytes. It is undone on every way out of here: the command's
		// end, an error, and the signals that end dsec (they cancel ctx).
		restore, err := lt.makeRaw()
		if err != nil {
			return err
		}
		defer restore()
		var stop context.CancelFunc
		ctx, stop = notifyEnd(ctx)
		defer stop()
	}
	s, err := start(ctx, req, sopts)
	if err != nil {
		return err
	}
	if follow {
		stop := lt.onResize(func(sz api.TermSize) {
			sz = clampSize(sz)
			_ = s.Resize(sz.Cols, sz.Rows)
		})
		defer stop()
	}
	res, err := s.Wait()
	if err != nil {
		return err
	}
	return exitFromResult(res)
}

// parseTermSize parses --size COLSxROWS.
func parseTermSize(s string) (api.TermSize, error) {
	c, r, ok := strings.Cut(strings.ToLower(s), "x")
	var sz api.TermSize
	if ok {
		_, err1 := fmt.Sscanf(c, "%d", &sz.Cols)
		_, err2 := fmt.Sscanf(r, "%d", &sz.Rows)
		ok = err1 == nil && err2 == nil && fmt.Sprintf("%dx%d", sz.Cols, sz.Rows) == strings.ToLower(s)
	}
	if !ok {
		return api.TermSize{}, fmt.Errorf("invalid --size %q: want COLSxROWS, e.g. 120x40", s)
	}
	if sz.Cols < 1 || sz.Rows < 1 || sz.Cols > maxTermDim || sz.Rows > maxTermDim {
		return api.TermSize{}, fmt.Errorf("invalid --size %q: columns and rows go from 1 to %d", s, maxTermDim)
	}
	return sz, nil
}

// maxTermDim is the largest terminal side the server takes.
const maxTermDim = api.MaxTermSide

// clampSize fits a local window's size into what the server takes.
func clampSize(sz api.TermSize) api.TermSize {
	sz.Cols = min(max(sz.Cols, 1), maxTermDim)
	sz.Rows = min(max(sz.Rows, 1), maxTermDim)
	return sz
}
