package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/internal/bench"
)

// benchSandboxFusionCmd is `dsec bench sandboxfusion`.
func benchSandboxFusionCmd() *cobra.Command {
	var o bench.SandboxFusionOptions
	var asJSON bool
	var tokenFile string
	c := &cobra.Command{
		Use:   "sandboxfusion",
		Short: "Send N concurrent SandboxFusion /run_code calls to a node or an API server: p50/p99 and what came back (only verdicts or 504 expected)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tokenFile != "" {
				b, err := os.ReadFile(tokenFile)
				if err != nil {
					return err
				}
				o.Token = strings.TrimSpace(string(b))
			}
			r, err := bench.SandboxFusion(cmd.Context(), o)
			if err != nil {
				return err
			}
			if asJSON {
				if err := bench.EncodeJSON(cmd.Context(), os.Stdout, r); err != nil {
					return err
				}
			} else {
				fmt.Printf("%d /run_code calls (%d in flight) to %s: %.1f s, %.1f calls/s, p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
					r.N, r.Parallel, r.URL, r.WallS, r.CallsPerS, r.P50ms, r.P99ms, r.Maxms)
				for _, k := range slices.Sorted(maps.Keys(r.HTTPStatus)) {
					fmt.Printf("  HTTP %s: %d\n", k, r.HTTPStatus[k])
				}
				for _, k := range slices.Sorted(maps.Keys(r.RunStatus)) {
					fmt.Printf("  status %s: %d\n", k, r.RunStatus[k])
				}
				if r.FirstOther != "" {
					fmt.Println("  first other answer:", r.FirstOther)
				}
			}
			if !r.OnlyVerdictsOr504 {
				return fmt.Errorf("sandboxfusion: answers other than verdicts or 504 (%d wrong outputs)", r.WrongOutput)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&o.URL, "url", "http://127.0.0.1:8080", "SandboxFusion endpoint (a --sandboxfusion-listen address, or a server or API server listener with --token-file)")
	f.StringVar(&tokenFile, "token-file", "", "file holding the bearer token (DATA_DIR/token of the server or API server)")
	f.IntVar(&o.N, "n", 2000, "calls to send")
	f.IntVar(&o.Parallel, "parallel", 0, "calls in flight at once (default: all of them, a burst)")
	f.StringVar(&o.Language, "language", "python", "SandboxFusion language of the program")
	f.StringVar(&o.Code, "code", "", "the program (default: Python printing its stdin, the call's index)")
	f.DurationVar(&o.Timeout, "timeout", 0, "client timeout of one call (default 10m)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	return c
}
