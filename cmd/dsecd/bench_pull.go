package main

import (
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/internal/bench"
	"github.com/dsec-dev/dsec/internal/cliflag"
)

// benchPullCmd is `dsec bench pull`.
func benchPullCmd() *cobra.Command {
	var o bench.PullOptions
	var asJSON bool
	var layerSize string
	c := &cobra.Command{
		Use:   "pull",
		Short: "Images by reference from a registry on loopback: cold create (empty blob store) vs warm, and concurrent creates of a never-seen image counting registry fetches per layer",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.LayerBytes, err = cliflag.ParseSize(layerSize); err != nil {
				return err
			}
			r, err := bench.Pull(cmd.Context(), o)
			if asJSON {
				if jerr := bench.EncodeJSON(cmd.Context(), os.Stdout, r); jerr != nil {
					return jerr
				}
				return err
			}
			fmt.Printf("%s: %d layers, %.1f MB compressed\n", r.Ref, r.Layers, float64(r.CompressedBytes)/1e6)
			fmt.Printf("cold create→exec (empty blob store): p50 %.0f ms, max %.0f ms\n", r.Cold.P50ms, r.Cold.Maxms)
			fmt.Printf("warm create→exec (layers stored):    p50 %.0f ms, max %.0f ms\n", r.Warm.P50ms, r.Warm.Maxms)
			fmt.Printf("%d concurrent creates of a never-seen image: p50 %.0f ms, max %.0f ms\n", r.Parallel, r.Concurrent.P50ms, r.Concurrent.Maxms)
			for _, dg := range slices.Sorted(maps.Keys(r.FetchesPerLayer)) {
				fmt.Printf("  layer %s fetched %d time(s)\n", dg[:19], r.FetchesPerLayer[dg])
			}
			if r.Failures > 0 {
				fmt.Printf("failures %d: %s\n", r.Failures, r.FirstError)
			}
			return err
		},
	}
	c.Flags().StringVar(&o.Image, "image", "", "directory image whose tree is the pushed image's base layer (default busybox)")
	c.Flags().IntVar(&o.Layers, "layers", 0, "random-content layers on top of the base (default 4; -1: none)")
	c.Flags().StringVar(&layerSize, "layer-size", "16m", "size of each random layer")
	c.Flags().IntVar(&o.Rounds, "rounds", 0, "cold creates, each on a fresh node (default 3)")
	c.Flags().IntVarP(&o.N, "n", "n", 0, "warm creates (default 10)")
	c.Flags().IntVar(&o.Parallel, "parallel", 0, "concurrent creates of the never-seen image (default 20)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return c
}
