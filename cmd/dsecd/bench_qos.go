package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	daemon "github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/internal/bench"
	"github.com/dsec-dev/dsec/internal/cliflag"
)

// benchQoSCmds are `dsec bench qos` and `dsec bench reclaim`.
func benchQoSCmds() []*cobra.Command {
	var qo, ro bench.Options
	var qJSON, rJSON bool
	var zram string
	var randPerPage, lsWeight int
	var lsSlice, beSlice time.Duration
	q := &cobra.Command{
		Use:   "qos",
		Short: "LS task (2 ms CPU bursts every 5 ms) p99: unloaded, under BE saturation without CPU classes, with them",
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := bench.QoS(cmd.Context(), qo, func(c *daemon.Config) {
				c.QoS.LSCPUWeight, c.QoS.LSSlice, c.QoS.BESlice = lsWeight, lsSlice, beSlice
			})
			if err != nil {
				return err
			}
			if qJSON {
				return bench.EncodeJSON(cmd.Context(), os.Stdout, r)
			}
			for _, p := range []struct {
				name string
				ph   bench.QoSPhase
			}{{"unloaded", r.Unloaded}, {"loaded, no classes", r.NoClasses}, {"loaded, load in be", r.Classes}} {
				fmt.Printf("%-20s p50 %6.2f ms  p99 %6.2f ms  max %6.2f ms  (load avg %.2f; node CPU %.1f%%, steal %.1f%%)\n",
					p.name, p.ph.P50ms, p.ph.P99ms, p.ph.Maxms, p.ph.Load1, p.ph.NodeCPUPct, p.ph.StealPct)
				t := p.ph.Tail
				fmt.Printf("%-20s worst %d: %.2f ms = wake %.2f (runnable %.2f, other %.2f) + burst %.2f (preempted %.2f, on CPU %.2f, other %.2f)\n",
					"", t.Bursts, t.LatencyMs, t.WakeMs, t.WakeRunnableMs, t.WakeOtherMs, t.BurstMs, t.PreemptedMs, t.OnCPUMs, t.BurstOtherMs)
			}
			fmt.Printf("with classes / unloaded p99: %.2fx (target <= 1.2x); core scheduling: %v; LS parent cpu weight %d, LS slice %.2f ms\n",
				r.Ratio, r.CoreScheduling, r.LSCPUWeight, r.LSSliceMs)
			return nil
		},
	}
	q.Flags().IntVar(&qo.N, "n", 600, "bursts per phase")
	q.Flags().StringVar(&qo.Image, "image", "", "image (default: debian)")
	q.Flags().BoolVar(&qJSON, "json", false, "print one JSON object")
	q.Flags().IntVar(&lsWeight, "ls-cpu-weight", 0, "cpu weight of the sandboxes' parent, 1-10000 (0: the node's default, -1: the kernel's)")
	q.Flags().DurationVar(&lsSlice, "ls-slice", 0, "scheduler slice of LS threads (0: the node's default, -1ns: the kernel's)")
	q.Flags().DurationVar(&beSlice, "be-slice", 0, "scheduler slice of BE threads (0: the node's default, -1ns: the kernel's)")

	r := &cobra.Command{
		Use:   "reclaim",
		Short: "N sandboxes holding 64 MiB each: host memory before/after pause --reclaim, resume → first exec, vs plain pause",
		RunE: func(cmd *cobra.Command, _ []string) error {
			var size int64
			if zram != "" {
				var err error
				if size, err = parseSwap(zram); err != nil {
					return err
				}
			}
			res, err := bench.Reclaim(cmd.Context(), ro, size, randPerPage)
			if err != nil {
				return err
			}
			if rJSON {
				return bench.EncodeJSON(cmd.Context(), os.Stdout, res)
			}
			printReclaim(res)
			return nil
		},
	}
	r.Flags().IntVar(&ro.N, "n", 50, "sandboxes")
	r.Flags().IntVar(&ro.Parallel, "parallel", 4, "concurrent creates")
	r.Flags().StringVar(&ro.Image, "image", "", "image (default: debian)")
	r.Flags().StringVar(&zram, "swap", "", "zram:SIZE for the benchmark's node (default: 1.25 x the memory held)")
	r.Flags().IntVar(&randPerPage, "random-bytes", 512, "random bytes in each 4 KiB page held (the rest zero): 512 compresses ~6x, 4096 not at all")
	r.Flags().BoolVar(&rJSON, "json", false, "print one JSON object")
	return []*cobra.Command{q, r}
}

func printReclaim(r bench.ReclaimResult) {
	fmt.Printf("%d sandboxes x %d MiB (%s); swap %s (%s)\n", r.Sandboxes, r.HoldMiB, r.Content, r.Swap, cliflag.HumanBytes(r.SwapBytes))
	for _, p := range []struct {
		name string
		ph   bench.ReclaimPhase
	}{{"pause", r.Plain}, {"pause --reclaim", r.Reclaim}} {
		fmt.Printf("%-16s host memory for the sandboxes %s -> %s (%.0f%% less); their cgroups %s -> %s; load avg %.2f\n",
			p.name, cliflag.HumanBytes(p.ph.HostBeforeBytes), cliflag.HumanBytes(p.ph.HostAfterBytes), 100*p.ph.HostReduction,
			cliflag.HumanBytes(p.ph.CgroupsBeforeBytes), cliflag.HumanBytes(p.ph.CgroupsAfterBytes), p.ph.Load1)
		fmt.Printf("%-16s resume p50 %.2f ms p99 %.2f ms; resume -> first exec p50 %.2f ms p99 %.2f ms; checksums ok %d/%d\n",
			"", p.ph.Resume.P50ms, p.ph.Resume.P99ms, p.ph.FirstExec.P50ms, p.ph.FirstExec.P99ms, p.ph.ChecksumsOK, r.Sandboxes)
	}
	if r.ZramOrigBytes > 0 {
		fmt.Printf("zram at its fullest: %s of pages in %s (%.1fx)\n", cliflag.HumanBytes(r.ZramOrigBytes), cliflag.HumanBytes(r.ZramUsedBytes), r.ZramRatio)
	}
}
