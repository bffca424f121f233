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
	var layerSize, imageSize, burstImageSize string
	c := &cobra.Command{
		Use:   "pull",
		Short: "Images by reference from a registry on loopback: cold create (empty blob store) vs warm, and concurrent creates of a never-seen image counting registry fetches per layer",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.LayerBytes, err = cliflag.ParseSize(layerSize); err != nil {
				return err
			}
			if o.ImageBytes, err = cliflag.ParseSize(imageSize); err != nil {
				return err
			}
			if o.BurstImageBytes, err = cliflag.ParseSize(burstImageSize); err != nil {
				return err
			}
			r, err := bench.Pull(cmd.Context(), o)
			if asJSON {
				if jerr := bench.EncodeJSON(cmd.Context(), os.Stdout, r); jerr != nil {
					return jerr
				}
				return err
			}
			if b := r.Burst; b != nil {
				printBurst(b)
				return err
			}
			fmt.Printf("%s: %d layers, %.1f MB of files, %.1f MB compressed\n", r.Ref, r.Layers, float64(r.ContentBytes)/1e6, float64(r.CompressedBytes)/1e6)
			fmt.Printf("cold create→exec (empty blob store): p50 %.0f ms, max %.0f ms\n", r.Cold.P50ms, r.Cold.Maxms)
			fmt.Printf("never-seen node, layers in its blob store: p50 %.0f ms, max %.0f ms\n", r.Stored.P50ms, r.Stored.Maxms)
			for _, name := range slices.Sorted(maps.Keys(r.Peers)) {
				p := r.Peers[name]
				fmt.Printf("%s cold (%s storage): p50 %.0f ms, max %.0f ms; dsec cold/%s p50 %.2f\n", name, p.StorageDriver, p.Cold.P50ms, p.Cold.Maxms, name, r.RatiosP50["dsec-cold/"+name])
			}
			for name, why := range r.Skipped {
				fmt.Printf("%s skipped: %s\n", name, why)
			}
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
	c.Flags().StringVar(&layerSize, "layer-size", "16m", "size of each generated layer")
	c.Flags().StringVar(&imageSize, "image-size", "", "total size of the generated layers instead (e.g. 1GB; --layers default: one per 256 MiB, at least 4)")
	c.Flags().StringSliceVar(&o.Compare, "compare", nil, "peers timed on the same image from the same registry, cold: podman")
	c.Flags().StringVar(&o.PodmanDriver, "podman-storage-driver", "", "podman's storage driver: overlay or vfs (default overlay where it works, else vfs)")
	c.Flags().IntVar(&o.Burst, "burst", 0, "run the burst instead: this many sandboxes over --burst-images images sharing a base, each answering an exec")
	c.Flags().IntVar(&o.BurstImages, "burst-images", 0, "distinct images of the burst (default 8)")
	c.Flags().StringVar(&burstImageSize, "burst-image-size", "", "size of each burst image's files, half in the shared base (default 200m)")
	c.Flags().IntVar(&o.Rounds, "rounds", 0, "cold creates, each on a fresh node (default 3)")
	c.Flags().IntVarP(&o.N, "n", "n", 0, "warm creates (default 10)")
	c.Flags().IntVar(&o.Parallel, "parallel", 0, "concurrent creates of the never-seen image (default 20); the burst's workers per side (default 8)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return c
}

func printBurst(b *bench.BurstPullResult) {
	fmt.Printf("burst: %d sandboxes over %d images of %.0f MB (%.0f MB shared base), %d workers; task: %s\n",
		b.Sandboxes, b.Images, float64(b.ImageContentBytes)/1e6, float64(b.SharedContentBytes)/1e6, b.Workers, b.Task)
	for _, name := range slices.Sorted(maps.Keys(b.Sides)) {
		s := b.Sides[name]
		fmt.Printf("%s: all answered in %.1f s", name, s.AllAnsweredS)
		if s.PullS > 0 {
			fmt.Printf(" (pulls first: %.1f s)", s.PullS)
		}
		fmt.Printf(", per sandbox p50 %.0f ms; %.0f MB on disk", s.PerSandbox.P50ms, float64(s.DiskBytes)/1e6)
		if s.BlobStoreBytes > 0 {
			fmt.Printf(" (blob store %.0f MB, node-local %.0f MB); read %.1f%% of the images", float64(s.BlobStoreBytes)/1e6, float64(s.NodeLocalBytes)/1e6, 100*s.FractionRead)
		}
		if s.Failures > 0 {
			fmt.Printf("; failures %d: %s", s.Failures, s.FirstError)
		}
		fmt.Println()
	}
}
