package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/internal/progress"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// rmGrace bounds `dsec run --rm`'s delete once the command is over, also
// after an interrupt.
const rmGrace = 30 * time.Second

func runCmd() *cobra.Command {
	var sf sandboxFlags
	var o execOptions
	var shell, rm bool
	c := &cobra.Command{
		Use:   "run [--rm] [--image IMAGE] [create flags] [-i] [-t] -- CMD [ARGS...]",
		Short: "Create a sandbox and run a command in it, streaming its output (--rm: then delete it); exits with the command's exit code",
		Long: `Create a sandbox and run a command in it, streaming its output; dsec exits with
the command's exit code. One request does what create, exec and rm do
(POST /v1/sandboxes:run).

Every flag of dsec create describes the sandbox (--image, --memory, --env for
every process, --allow, ...); -i, -t, --size, --workdir, --user, --timeout and
--shell are those of dsec exec.

With --rm the server deletes the sandbox once the command ends, however it
ends: also after Ctrl-C, when dsec itself is killed, and when the create was
interrupted. (With -t and an image by reference, whose fetch shows progress
before the terminal turns raw, dsec sends create, exec and rm as separate
requests and deletes the sandbox itself; then not when it is killed.)
Without --rm the sandbox stays, and its ID is printed on stderr before the
command runs.`,
		Example: `  dsec run --rm -- python3 -c 'print(1 + 1)'
  dsec run --rm --image python:3.12-slim --memory 1g -- python3 -V
  dsec run --rm -it -- bash`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			req, err := sf.request(cmd)
			if err != nil {
				return err
			}
			xreq := api.ExecRequest{Cmd: args}
			if shell {
				xreq = api.ExecRequest{Shell: strings.Join(args, " ")}
			}
			if _, _, err := o.prepare(ctx, xreq); err != nil {
				return err // before anything is created
			}
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			if o.tty && isReference(req.Image) {
				// A pull's progress goes to the terminal before it is raw.
				return runSeparately(ctx, cl, req, xreq, o, rm)
			}
			stopWatch := func() {}
			if isReference(req.Image) {
				stopWatch = sync.OnceFunc(progress.WatchPull(ctx, os.Stderr, req.Image, cl.WatchPull))
			}
			defer stopWatch()
			var run *client.Stream
			start := func(ctx context.Context, xreq api.ExecRequest, sopts client.StreamOptions) (*client.Stream, error) {
				sopts.OnSandbox = func(sb api.Sandbox) {
					stopWatch()
					if !rm { // before the command's output
						fmt.Fprintf(os.Stderr, "dsec: sandbox %s (dsec rm %s deletes it)\n", sb.ID, sb.ID)
					}
				}
				s, err := cl.StartRun(ctx, api.RunRequest{Sandbox: req, Exec: xreq, Remove: rm}, sopts)
				stopWatch()
				run = s
				return s, err
			}
			err = runExecWith(ctx, start, xreq, o)
			if run != nil {
				if derr := run.RemoveError(); derr != nil {
					derr = fmt.Errorf("delete sandbox %s: %w", run.Sandbox().ID, derr)
					if err == nil {
						return derr
					}
					fmt.Fprintf(os.Stderr, "dsec: %v\n", derr)
				}
			}
			return err
		},
	}
	sf.add(c)
	f := c.Flags()
	f.BoolVar(&rm, "rm", false, "delete the sandbox once the command ends")
	f.StringVarP(&o.cwd, "workdir", "w", "", "working directory of the command inside the sandbox")
	f.StringVarP(&o.user, "user", "u", "", "user of the command: root, a name, UID or UID:GID")
	f.StringVar(&o.size, "size", "", "terminal size COLSxROWS, e.g. 120x40 (default: the local terminal's, else 80x24)")
	f.StringVar(&o.timeout, "timeout", "", "kill the command after this long, e.g. 30s")
	f.BoolVarP(&o.interactive, "interactive", "i", false, "forward standard input")
	f.BoolVarP(&o.tty, "tty", "t", false, "allocate a terminal in the sandbox")
	f.BoolVar(&shell, "shell", false, "join the arguments and run them with /bin/sh -c")
	return c
}

// runSeparately is dsec run as create, exec and delete requests, for a
// terminal session whose image may first be fetched: the pull's progress
// is shown before the terminal turns raw. With rm the client deletes the
// sandbox, also after an interrupt.
func runSeparately(ctx context.Context, cl *client.Client, req api.CreateSandboxRequest, xreq api.ExecRequest, o execOptions, rm bool) error {
	if rm && req.RequestID == "" {
		// An interrupted create is found again by this key and deleted.
		req.RequestID = "dsec-run-" + rand.Text()
	}
	sb, err := createWatched(ctx, cl, req)
	if err != nil {
		if rm && ctx.Err() != nil {
			dropInterrupted(ctx, cl, req)
		}
		return err
	}
	if !rm {
		fmt.Fprintf(os.Stderr, "dsec: sandbox %s (dsec rm %s deletes it)\n", sb.ID, sb.ID)
	}
	err = runExecWith(ctx, execIn(cl, sb.ID), xreq, o)
	if rm {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rmGrace)
		defer cancel()
		if derr := cl.Delete(dctx, sb.ID); derr != nil && !isNotFound(derr) {
			derr = fmt.Errorf("delete sandbox %s: %w", sb.ID, derr)
			if err == nil {
				return derr
			}
			fmt.Fprintf(os.Stderr, "dsec: %v\n", derr)
		}
	}
	return err
}

// isNotFound reports whether err is the server's not_found (the sandbox is
// already gone, e.g. its TTL passed).
func isNotFound(err error) bool {
	ae, ok := api.AsError(err)
	return ok && ae.Code == api.CodeNotFound
}

// dropInterrupted deletes what an interrupted create of req made, if
// anything: the server answers a create with the same request ID with that
// sandbox.
func dropInterrupted(ctx context.Context, cl *client.Client, req api.CreateSandboxRequest) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rmGrace)
	defer cancel()
	req.Wait = new(bool) // answer at once, even while an image is fetched
	sb, err := cl.Create(dctx, req)
	if err == nil {
		err = cl.Delete(dctx, sb.ID)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "dsec: could not delete the interrupted sandbox (request ID %s): %v\n", req.RequestID, err)
	}
}
