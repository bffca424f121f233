package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/internal/bench"
	"github.com/dsec-dev/dsec/internal/bench/placebench"
)

// benchPlacementCmd is `dsec bench placement`.
func benchPlacementCmd() *cobra.Command {
	o := placebench.Defaults
	var asJSON bool
	c := &cobra.Command{
		Use:   "placement",
		Short: "Placement engine over a simulated cluster snapshot: placements/s, spread, rejections, backpressure",
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := placebench.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			if asJSON {
				return bench.EncodeJSON(cmd.Context(), os.Stdout, r)
			}
			for _, p := range []placebench.Phase{r.Main, r.Rejecting, r.HalfCapacity} {
				rej := ""
				if p.RejectFraction > 0 {
					rej = fmt.Sprintf(", %.0f%% of nodes reject %.0f%% of admissions", 100*p.RejectFraction, 100*r.Options.RejectProb)
				}
				fmt.Printf("%-13s %d sandboxes on %d nodes (capacity x%.2f%s): %.0f placements/s, placed %d, resource_exhausted %d (%d with Retry-After %.0fs), other errors %d\n",
					p.Name, p.Attempts, r.Options.Nodes, p.CapacityFactor, rej,
					p.PlacementsPerS, p.Placements, p.Exhausted, p.ExhaustedWithRetryAfter, p.RetryAfterS, p.OtherErrors)
				fmt.Printf("              per node max/mean %.3f p99/mean %.3f min/mean %.3f; rejections %d, re-placements %d (agent found node full %d); locality %.2f; load %.2f → %.2f\n",
					p.SpreadMaxOverMean, p.SpreadP99OverMean, p.SpreadMinOverMean, p.Rejections, p.Replacements, p.AdmissionFull, p.LocalityHit, p.LoadAvgBefore[0], p.LoadAvgAfter[0])
				if p.FirstError != "" {
					fmt.Printf("              first error: %s\n", p.FirstError)
				}
			}
			if b := r.Batch; b != nil {
				fmt.Printf("batch         one PlaceBatch of %d: %.1f ms (%.0f placements/s) %s; load %.2f\n", b.N, b.Ms, b.PerS, b.Error, b.LoadAvgBefore[0])
			}
			return nil
		},
	}
	f := c.Flags()
	f.IntVar(&o.Nodes, "nodes", o.Nodes, "simulated nodes")
	f.IntVar(&o.Sandboxes, "sandboxes", o.Sandboxes, "sandboxes to place per phase")
	f.IntVar(&o.Goroutines, "goroutines", o.Goroutines, "goroutines placing at once")
	f.IntVar(&o.Engines, "engines", o.Engines, "independent engine instances (API servers), goroutines spread over them")
	f.IntVar(&o.K, "k", o.K, "power-of-k: nodes sampled per placement")
	f.IntVar(&o.RefreshEvery, "refresh-every", o.RefreshEvery, "placements per engine between snapshots")
	f.Float64Var(&o.CapacityFactor, "capacity-factor", o.CapacityFactor, "cluster sandbox slots over sandboxes, main and rejecting phases (the last phase uses 0.5)")
	f.Float64Var(&o.RejectFraction, "reject-fraction", o.RejectFraction, "fraction of nodes that reject in the rejecting phase")
	f.Float64Var(&o.RejectProb, "reject-prob", o.RejectProb, "how often a rejecting node rejects")
	f.IntVar(&o.Batch, "batch", o.Batch, "size of one PlaceBatch call (0: skip)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	return c
}
