package main

import (
	"errors"
	"os"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/internal/image/lazy"
)

// layerdCmd is the node's layer daemon (FUSE blob files, chunk cache, EROFS layer
// mounts). The agent starts it with its config in the environment; it outlives
// agent restarts so running sandboxes keep their file systems. layerd starts the
// same command as its holder (lazy.EnvHolder), which keeps the FUSE connection
// across a layerd crash and starts layerd again.
func layerdCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "layerd",
		Short:  "Layer daemon (started by the node agent)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			// layerd, or its holder (which layerd starts as this same command).
			if os.Getenv(lazy.EnvMain) == "" && os.Getenv(lazy.EnvHolder) == "" {
				return errors.New("layerd is started by the node agent, with its config in " + lazy.EnvMain)
			}
			lazy.MaybeMain() // exits
			return nil
		},
	}
}
