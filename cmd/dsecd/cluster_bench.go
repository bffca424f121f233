package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/internal/bench"
)

// benchClusterCmd is `dsec bench cluster`.
func benchClusterCmd() *cobra.Command {
	o := bench.ClusterOptions{Nodes: 160, N: 20000, Parallel: 64, Batch: 100, BatchParallel: 4}
	var asJSON bool
	c := &cobra.Command{
		Use:   "cluster",
		Short: "Creates through one real API server (HTTP, auth, placement, node RPC) to simulated agents that only admit",
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := bench.RunCluster(cmd.Context(), o)
			if err != nil {
				return err
			}
			if asJSON {
				return bench.EncodeJSON(cmd.Context(), os.Stdout, r)
			}
			phases := []bench.ClusterPhase{r.Full, r.Half}
			if r.BatchPhase != nil {
				phases = append(phases, *r.BatchPhase)
			}
			for _, p := range phases {
				fmt.Printf("%-14s %d creates, %d slots: %d created, %.0f creates/s, p50 %.2f ms p99 %.2f ms; %.3f CPU ms/create; resource_exhausted %d (%d with Retry-After), failures %d; spread max/mean %.2f\n",
					p.Name, p.Creates, p.Capacity, p.Created, p.CreatesPerS, p.P50ms, p.P99ms, p.CPUmsPerCreate, p.Exhausted, p.ExhaustedRetryAfter, p.Failures, p.SpreadMaxOverMean)
				if p.FirstFailure != "" {
					fmt.Printf("               first failure: %s\n", p.FirstFailure)
				}
			}
			return nil
		},
	}
	f := c.Flags()
	f.IntVar(&o.Nodes, "simulated-nodes", o.Nodes, "simulated agents")
	f.IntVar(&o.N, "n", o.N, "creates per phase")
	f.IntVar(&o.Parallel, "parallel", o.Parallel, "creates in flight")
	f.IntVar(&o.Batch, "batch", o.Batch, "also make the N sandboxes through POST /v1/sandboxes:batch, this many per request (0: skip)")
	f.IntVar(&o.BatchParallel, "batch-parallel", o.BatchParallel, "batch requests in flight")
	f.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the run to this file (samples labeled role=apiserver|node|client|etcd)")
	f.StringVar(&o.MemProfile, "memprofile", "", "write an allocation profile of the run to this file")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	return c
}
