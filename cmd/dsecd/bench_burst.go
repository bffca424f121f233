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

// benchBurstCmd is `dsec bench burst`.
func benchBurstCmd() *cobra.Command {
	var o bench.BurstOptions
	var asJSON bool
	c := &cobra.Command{
		Use:   "burst",
		Short: "Send N creates at once to a dsec server process with --max-sandboxes LIMIT: exactly LIMIT must succeed, the rest get resource_exhausted with Retry-After",
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := bench.Burst(cmd.Context(), o)
			if err != nil {
				return err
			}
			if asJSON {
				if err := bench.EncodeJSON(cmd.Context(), os.Stdout, r); err != nil {
					return err
				}
			} else {
				fmt.Printf("burst of %d creates (%d in flight) at a limit of %d: created %d, resource_exhausted %d (%d with Retry-After), other %d, hung %d; listed %d afterwards\n",
					r.N, r.Parallel, r.Limit, r.Created, r.Exhausted, r.WithRetryAfter, r.Other, r.Hung, r.Listed)
				fmt.Printf("wall %.1f s; create p50 %.1f ms p99 %.1f ms; refusal p50 %.2f ms p99 %.2f ms max %.1f ms; server RSS %d -> max %d -> %d MiB; teardown %.1f s\n",
					r.WallS, r.CreateP50ms, r.CreateP99ms, r.RejectP50ms, r.RejectP99ms, r.RejectMaxms, r.RSSStartKB>>10, r.RSSMaxKB>>10, r.RSSEndKB>>10, r.TeardownS)
				if r.FirstOther != "" {
					fmt.Println("first other error:", r.FirstOther)
				}
			}
			if !r.Exact {
				return fmt.Errorf("burst: not exactly %d created with every other create refused with Retry-After", r.Limit)
			}
			return nil
		},
	}
	f := c.Flags()
	f.IntVar(&o.N, "n", 32000, "creates to send")
	f.IntVar(&o.Limit, "max-sandboxes", 5000, "the server's sandbox limit")
	f.IntVar(&o.Parallel, "parallel", 256, "creates in flight at once")
	f.StringVar(&o.Image, "image", "", "image (default: the server's)")
	f.DurationVar(&o.Timeout, "timeout", 0, "a create not answered within this counts as hung (default 60s)")
	f.StringVar(&o.DataDir, "data-dir", "", "the server's data dir, kept afterwards (default: a scratch dir under /var/lib/dsec, removed)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	return c
}

// benchCreateCompare is `dsec bench create` (interleaved, through the API and
// the CLI, against peers doing the same work).
func benchCreateCompare(cmd *cobra.Command, o bench.CompareOptions, print func(any, func()) error) error {
	o.Logger = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	r, err := bench.CreateCompare(cmd.Context(), o)
	if err != nil {
		return err
	}
	return print(r, func() {
		fmt.Printf("%d creates per side, %d workers, turns of %d (%s)\n", r.N, r.Parallel, r.Batch, strings.Join(r.Order, ", "))
		for _, name := range r.Order {
			s := r.Sides[name]
			fmt.Printf("%-9s %7.1f/s  p50 %7.2f ms  p99 %7.2f ms  teardown %6.2f s  failures %d\n", name, s.PerSecond, s.P50ms, s.P99ms, s.TeardownS, s.Failures)
			for _, w := range s.Work {
				fmt.Printf("          - %s\n", w)
			}
			if s.FirstError != "" {
				fmt.Printf("          first error: %s\n", s.FirstError)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(r.Skipped)) {
			fmt.Printf("%-9s skipped: %s\n", k, r.Skipped[k])
		}
		for _, k := range slices.Sorted(maps.Keys(r.Ratios)) {
			fmt.Printf("%s: %.2fx\n", k, r.Ratios[k])
		}
	})
}
