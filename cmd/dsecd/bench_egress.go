package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/internal/bench"
	"github.com/dsec-dev/dsec/pkg/api"
)

// benchEgress runs `dsec bench create --network ...`.
func benchEgress(cmd *cobra.Command, o bench.Options, p api.NetworkPolicy, print func(any, func()) error) error {
	r, err := bench.CreateEgress(cmd.Context(), o, p)
	if err != nil {
		return err
	}
	return print(r, func() {
		for _, ps := range r.Passes {
			kind := "default"
			if ps.Network {
				kind = "egress "
			}
			fmt.Printf("%s: %d creates, %.1f/s, p50 %.2f ms, p99 %.2f ms, teardown %.2f s, failures %d\n",
				kind, r.N, ps.CreatesPerS, ps.P50ms, ps.P99ms, ps.TeardownS, ps.Failures)
		}
		fmt.Printf("egress/default: %.2fx (best pass each: %.1f/s vs %.1f/s)\n", r.Ratio, r.EgressPerS, r.DefaultPerS)
	})
}
