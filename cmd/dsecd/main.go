// Command dsecd is dsec's daemon binary: the node server (`dsecd server`), the
// cluster roles (agent, apiserver, an embedded etcd), the layer daemon, local
// image builds (`dsecd image`), the benchmarks (`dsecd bench ...`) and the demo:
// every command that links server-side code. The client, dsec, links none of it
// and runs these commands by exec'ing dsecd (`dsec server` is `dsecd server`).
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

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := &cobra.Command{
		Use:           "dsecd",
		Short:         "dsec's daemons: the node server, the cluster roles, image builds and benchmarks",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(serverCmd(), agentCmd(), apiserverCmd(), etcdCmd(), layerdCmd(),
		imageCmd(), benchCmd(), demoCmd(), doctorCmd())
	err := root.ExecuteContext(ctx)
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "dsecd:", err)
	if ae, ok := api.AsError(err); ok && ae.Infrastructure {
		os.Exit(75) // EX_TEMPFAIL: an infrastructure failure, retry may help
	}
	var ee interface{ ExitCode() int }
	if errors.As(err, &ee) {
		os.Exit(ee.ExitCode())
	}
	os.Exit(1)
}
