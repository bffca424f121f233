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

// benchCycleCmd is `dsec bench cycle`.
func benchCycleCmd() *cobra.Command {
	var o bench.CycleOptions
	var asJSON bool
	var peers string
	c := &cobra.Command{
		Use:   "cycle",
		Short: "The whole user cycle (create, exec true, rm) through the CLI, the Python SDK and E2B's JS SDK vs runc/crun/runsc/podman run on the same rootfs, interleaved; and each client's bare start-up",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Peers = []string{}
			if peers != "" {
				o.Peers = strings.Split(peers, ",")
			}
			o.Logger = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
			r, err := bench.Cycle(cmd.Context(), o)
			if err != nil {
				return err
			}
			if asJSON {
				return bench.EncodeJSON(cmd.Context(), os.Stdout, r)
			}
			fmt.Printf("%d interleaved rounds, image %s\n", r.Rounds, r.Image)
			for _, name := range r.Order {
				s, kind := r.Sides[name], "cycle"
				if s == nil {
					s, kind = r.Startup[name], "start-up"
				}
				fmt.Printf("%-16s %-8s min %8.2f ms  p50 %8.2f ms  p99 %8.2f ms  (%d, failures %d)  %s\n",
					name, kind, s.Minms, s.P50ms, s.P99ms, s.N, s.Failures, s.Work)
				if s.FirstError != "" {
					fmt.Printf("%-16s first error: %s\n", "", s.FirstError)
				}
			}
			for _, k := range slices.Sorted(maps.Keys(r.Missing)) {
				fmt.Printf("%-16s missing: %s\n", k, r.Missing[k])
			}
			for _, k := range slices.Sorted(maps.Keys(r.RatiosP50)) {
				fmt.Printf("p50 %s: %.2fx\n", k, r.RatiosP50[k])
			}
			return nil
		},
	}
	c.Flags().IntVar(&o.Rounds, "n", 20, "rounds (one cycle of every side each)")
	c.Flags().StringVar(&o.Image, "image", "", "image (default: debian)")
	c.Flags().StringVar(&peers, "peers", strings.Join(bench.CyclePeers, ","), "peer runtimes (those not installed are reported missing)")
	c.Flags().StringVar(&o.Python, "python", "", "Python interpreter (default: /usr/bin/python3 where it exists, else python3 on PATH)")
	c.Flags().StringVar(&o.PythonSDK, "python-sdk", "", "directory holding the dsec Python package (default: the installed one, else sdk/python beside bin/)")
	c.Flags().StringVar(&o.Node, "node", "", "Node.js binary of the e2b SDK side (default: node on PATH; missing: the side is reported missing)")
	c.Flags().StringVar(&o.E2BSDK, "e2b-sdk", "", "directory whose node_modules holds the e2b npm package (default: test/e2b beside bin/, after npm ci there)")
	c.Flags().IntVar(&o.WarmPool, "warm-pool", 0, "also run the CLI and Python SDK cycles against a second server with --warm-pool N (sides NAME-warm), in the same rounds")
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return c
}
