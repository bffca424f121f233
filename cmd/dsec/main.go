// Command dsec is dsec's single binary: the node server (`dsec server`), the client
// CLI (create, exec, ls, rm, cp, ...), the benchmarks (`dsec bench ...`) and a demo.
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
	root.AddCommand(serverCmd(), createCmd(), execCmd(), shellCmd(), lsCmd(), rmCmd(), cpCmd(), inspectCmd(),
		pauseCmd(), cpuClassCmd(), stateCmd("resume"), stateCmd("reset"), trajCmd(), benchCmd(), demoCmd(), fnCallCmd(), layerdCmd())
	root.AddCommand(topCmd())
	root.AddCommand(imageCmd(), forkCmd(), commitCmd())
	root.AddCommand(networkCmd(), infoCmd(), doctorCmd())
	root.AddCommand(etcdCmd(), agentCmd(), apiserverCmd(), nodesCmd(), projectCmd())
	root.AddCommand(screenshotCmd(), inputCmd())
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
