package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/internal/bench"
)

// benchTrajCmd is `dsec bench traj`.
func benchTrajCmd() *cobra.Command {
	var o bench.Options
	var to bench.TrajOptions
	var asJSON bool
	c := &cobra.Command{
		Use:   "traj",
		Short: "Trajectory log: overhead on exec, replay latency, logged steps/s (API and store alone)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := bench.Traj(cmd.Context(), o, to)
			if err != nil {
				return err
			}
			if asJSON {
				return bench.EncodeJSON(cmd.Context(), os.Stdout, r)
			}
			if to.LogOnly {
				printTrajLogOnly(r)
				return nil
			}
			fmt.Printf("exec true p50 %.3f ms, with trajectory tags %.3f ms: log overhead %.3f ms\n",
				r.ExecP50ms, r.TaggedExecP50ms, r.LogOverheadP50ms)
			fmt.Printf("disk: 1 KiB overwrite + fdatasync p50 %.3f ms (the one fsync a step waits for)\n", r.FdatasyncP50ms)
			fmt.Printf("replayed step p50 %.3f ms (p99 %.3f ms)\n", r.ReplayP50ms, r.ReplayP99ms)
			fmt.Printf("logged exec steps: %.1f/s across %d trajectories on %d sandboxes\n", r.StepsPerS, r.Trajectories, r.Sandboxes)
			printTrajLogOnly(r)
			if r.Failures > 0 {
				fmt.Printf("failures %d: %s\n", r.Failures, r.FirstError)
			}
			return nil
		},
	}
	c.Flags().IntVar(&o.N, "n", 500, "tagged and untagged execs for the overhead and replay measurements")
	c.Flags().StringVar(&o.Image, "image", "", "image (default: debian)")
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	c.Flags().BoolVar(&to.LogOnly, "log-only", false, "measure the store alone (no node, no sandboxes)")
	c.Flags().StringVar(&to.Dir, "dir", "", "with --log-only: where the store's temporary directory goes (default: the system's)")
	c.Flags().DurationVar(&to.SlowFsync, "slow-fsync", 5*time.Millisecond,
		"also measure the store alone with every WAL fsync made this much longer (a simulated slow disk; 0: skip)")
	return c
}

func printTrajLogOnly(r bench.TrajResult) {
	fmt.Printf("log alone (100 goroutines, Begin+Finish): %s %.1f steps/s, lone step p50 %.3f ms\n",
		r.Store, r.LogOnlyStepsPerS, r.LogOnlyP50ms)
	fmt.Printf("  bbolt: %.1f steps/s (lone step p50 %.3f ms)\n", r.LogOnlyBoltStepsPerS, r.LogOnlyBoltP50ms)
	if r.SlowDiskFsyncMs > 0 {
		fmt.Printf("  %s with every fsync %.0f ms longer (simulated slow disk): %.1f steps/s\n",
			r.Store, r.SlowDiskFsyncMs, r.LogOnlySlowDiskStepsPerS)
	}
}
