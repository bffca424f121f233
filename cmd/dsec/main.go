// Command dsec is dsec's client: the commands a user runs against a server
// (create, exec, ls, rm, cp, logs, top, ...), linked with the API client only.
// The commands that need server-side code (server, agent, apiserver, etcd,
// image, bench, demo) are dsecd's; dsec runs them by exec'ing dsecd, so the
// one-command quickstart `dsec server` keeps working.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/pkg/api"
)

// exitError carries a process exit code out of a command (e.g. `dsec exec`).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := &cobra.Command{
		Use:           "dsec",
		Short:         "Sandboxes for training and evaluating AI agents",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(createCmd(), runCmd(), execCmd(), shellCmd(), lsCmd(), rmCmd(), cpCmd(), inspectCmd(),
		pauseCmd(), cpuClassCmd(), stateCmd("resume"), stateCmd("reset"), trajCmd(), fnCallCmd())
	root.AddCommand(topCmd())
	root.AddCommand(forkCmd(), commitCmd())
	root.AddCommand(networkCmd(), infoCmd())
	root.AddCommand(nodesCmd(), projectCmd())
	root.AddCommand(screenshotCmd(), inputCmd())
	for _, d := range daemonCommands() {
		root.AddCommand(daemonCmd(d))
	}
	err := root.ExecuteContext(ctx)
	var ee exitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		os.Exit(ee.code)
	default:
		fmt.Fprintln(os.Stderr, "dsec:", err)
		if ae, ok := api.AsError(err); ok && ae.Infrastructure {
			os.Exit(75) // EX_TEMPFAIL: an infrastructure failure, retry may help
		}
		os.Exit(1)
	}
}
