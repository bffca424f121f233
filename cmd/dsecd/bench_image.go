package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/internal/bench"
	"github.com/dsec-dev/dsec/internal/cliflag"
)

// benchImageCmd is `dsec bench image`.
func benchImageCmd() *cobra.Command {
	var o bench.ImageOptions
	var asJSON bool
	var chunk string
	var sweep []string
	c := &cobra.Command{
		Use:   "image",
		Short: "Layered images: bytes fetched and cold start (lazy vs full fetch) on never-seen nodes, create rate vs the directory image",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.ChunkSize, err = cliflag.ParseSize(chunk); err != nil {
				return err
			}
			for _, c := range sweep {
				n, err := cliflag.ParseSize(c)
				if err != nil || n <= 0 {
					return fmt.Errorf("--chunk-sweep: bad size %q", c)
				}
				o.Sweep = append(o.Sweep, n)
			}
			r, err := bench.Image(cmd.Context(), o)
			if asJSON {
				if jerr := bench.EncodeJSON(cmd.Context(), os.Stdout, r); jerr != nil {
					return jerr
				}
				return err
			}
			if r.BlobBytes > 0 {
				fmt.Printf("base layer of %s: %.1f MB EROFS, built in %.1f s; chunk %d KiB, store throttled to %.0f MB/s\n",
					r.Image, float64(r.BlobBytes)/1e6, r.LayerBuildS, r.ChunkSize>>10, float64(r.RateBytesPerS)/1e6)
			}
			for _, run := range []bench.ColdRun{r.Lazy, r.Prefetch, r.Full} {
				if run.Mode == "" {
					continue
				}
				fmt.Printf("%-8s: create %.3f s, first output %.3f s, total %.3f s, fetched %.2f MB in %d fetches (cache hits %d, misses %d; loop direct I/O %v, readahead %d KiB)\n",
					run.Mode, run.CreateS, run.FirstOutputS, run.TotalS, float64(run.BytesFetched)/1e6, run.Fetches, run.CacheHits, run.CacheMisses, run.LoopDirectIO, run.ReadAheadKB)
			}
			fmt.Printf("fetched_fraction %.4f, speedup %.2fx (lazy %.3f s vs full %.3f s to first output; %.2fx vs the bare transfer of the blob, %.3f s)\n",
				r.FetchedFraction, r.Speedup, r.LazyFirstOutputS, r.FullFirstOutputS, r.SpeedupVsFloor, r.FullTransferFloorS)
			if r.PrefetchFirstOutputS > 0 {
				fmt.Printf("with the lazy run's access list as prefetch list: first output %.3f s, %.2fx full, %.2fx the bare transfer (fetched %.4f)\n",
					r.PrefetchFirstOutputS, r.PrefetchSpeedup, r.PrefetchSpeedupVsFloor, r.PrefetchedFetchedFraction)
			}
			if m := r.Meta; m.Chunks > 0 {
				fmt.Printf("metadata: %d chunks, %.2f MB (%.4f of the blob)", m.Chunks, float64(m.Bytes)/1e6, m.Fraction)
				if m.ColdReads > 0 {
					fmt.Printf("; a cold start without the metadata prefetch read %d chunks, %d of them metadata (%d of the first half)", m.ColdReads, m.ColdReadsMeta, m.FirstHalfMeta)
				}
				fmt.Println()
			}
			if m := r.Meta; m.Rounds > 0 {
				fmt.Printf("metadata prefetch at mount, %d rounds interleaved (medians): first output %.3f s with vs %.3f s without (%.2fx), create %.3f vs %.3f s, fetched %.2f vs %.2f MB\n",
					m.Rounds, m.OnFirstOutputS, m.OffFirstOutputS, m.Speedup, m.OnCreateS, m.OffCreateS, float64(m.OnBytes)/1e6, float64(m.OffBytes)/1e6)
			}
			for _, s := range r.ChunkSweep {
				fmt.Printf("chunk %4d KiB: fetched %.2f MB (%.4f) in %d fetches, first output %.3f s\n",
					s.ChunkSize>>10, float64(s.BytesFetched)/1e6, s.FetchedFraction, s.Fetches, s.FirstOutputS)
			}
			if r.DirCreatesPerS > 0 {
				fmt.Printf("create on the mounted layer: %.1f/s vs directory image %.1f/s (ratio %.3f, %d each, parallel %d)\n",
					r.LayeredCreatesPerS, r.DirCreatesPerS, r.CreateRatio, r.CreateN, r.CreateParallel)
			}
			if r.Failures > 0 {
				fmt.Printf("failures %d: %s\n", r.Failures, r.FirstError)
			}
			return err
		},
	}
	c.Flags().StringVar(&o.Image, "image", "", "directory image to build the base layer from (default: debian)")
	c.Flags().StringVar(&chunk, "chunk", "", "layerd chunk size, e.g. 64k (default: lazy.DefaultChunkSize)")
	c.Flags().StringSliceVar(&sweep, "chunk-sweep", nil, "extra lazy cold runs at these chunk sizes, e.g. 32k,64k,128k,256k")
	c.Flags().IntVar(&o.ReadAheadKB, "read-ahead-kb", 0, "loop device readahead in KiB (0: layerd's default; -1: the kernel's)")
	c.Flags().BoolVar(&o.BufferedLoop, "buffered-loop", false, "loop device reads the FUSE blob file through the page cache (default: direct I/O)")
	c.Flags().BoolVar(&o.LoopDevice, "loop", false, "mount layers through a loop device instead of directly on the FUSE blob file")
	c.Flags().Int64Var(&o.Rate, "rate", 100_000_000, "blob store bandwidth in bytes per second")
	c.Flags().DurationVar(&o.Latency, "latency", 0, "blob store round trip added to every read (e.g. 2ms)")
	c.Flags().IntVar(&o.N, "n", 100, "sandboxes per image kind for the create-rate comparison (-1 skips it)")
	c.Flags().IntVar(&o.Parallel, "parallel", 4, "concurrent creates")
	c.Flags().BoolVar(&o.MetaPrefetch, "meta-prefetch", false, "nodes fetch the layer's metadata chunks when they mount it")
	c.Flags().IntVar(&o.MetaCompare, "meta-compare", 0, "rounds of lazy cold runs with and without the metadata prefetch, interleaved")
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return c
}
