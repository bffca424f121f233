package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/internal/bench"
)

// benchForkCmd is `dsec bench fork`.
func benchForkCmd() *cobra.Command {
	var o bench.ForkOptions
	var asJSON bool
	c := &cobra.Command{
		Use:   "fork",
		Short: "A parent writes --mb MB, forks --count children; per-child start + first exec, memory per child",
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := bench.Fork(cmd.Context(), o)
			if err != nil {
				return err
			}
			if asJSON {
				return bench.EncodeJSON(cmd.Context(), os.Stdout, r)
			}
			fmt.Printf("fork %d children of a parent with %d MB written (load %s → %s)\n", r.Count, r.ParentMB, r.LoadStart, r.LoadEnd)
			fmt.Printf("  copy of the writable layer %.1f ms (%d MB), fork call %.1f ms, all answered %.1f ms\n",
				r.SnapshotMs, r.SnapshotBytes>>20, r.ForkMs, r.AllAnsweredMs)
			fmt.Printf("  per child: start+first exec p50 %.2f ms p99 %.2f ms (target ≤ %.0f ms); first exec p50 %.2f ms\n",
				r.Child.P50ms, r.Child.P99ms, r.Targets.ChildP50Ms, r.ChildExec.P50ms)
			fmt.Printf("  host memory per child %d KiB (target ≤ %d KiB); per plain new sandbox %d KiB\n",
				r.BytesPerChild>>10, r.Targets.BytesPerChild>>10, r.PlainBytesPerSandbox>>10)
			fmt.Printf("  memory cgroup per child %d KiB, per plain sandbox %d KiB; slab %d / %d KiB\n",
				r.CgroupBytesPerChild>>10, r.CgroupBytesPerPlain>>10, r.SlabBytesPerChild>>10, r.SlabBytesPerPlain>>10)
			return nil
		},
	}
	c.Flags().IntVar(&o.Count, "count", 16, "children")
	c.Flags().IntVar(&o.MB, "mb", 200, "MB the parent writes to its writable layer first")
	c.Flags().StringVar(&o.Image, "image", "", "image (default: debian)")
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return c
}

// benchCommitCmd is `dsec bench commit`.
func benchCommitCmd() *cobra.Command {
	var o bench.CommitOptions
	var asJSON bool
	c := &cobra.Command{
		Use:   "commit",
		Short: "Commit a sandbox that installed --mb MB; time, layer size, create on a node that never saw it",
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := bench.Commit(cmd.Context(), o)
			if err != nil {
				return err
			}
			if asJSON {
				return bench.EncodeJSON(cmd.Context(), os.Stdout, r)
			}
			fmt.Printf("commit of %d MB installed (load %s → %s)\n", r.InstalledMB, r.LoadStart, r.LoadEnd)
			fmt.Printf("  first commit on the node (builds the base layer once) %.0f ms\n", r.BaseMs)
			fmt.Printf("  commit %.0f ms: layer %d MB, %d MB content, %d entries, %d excluded\n",
				r.CommitMs, r.LayerBytes>>20, r.ContentBytes>>20, r.Entries, r.Excluded)
			fmt.Printf("  fresh node: create %.1f ms, first exec %.1f ms\n", r.FreshCreateMs, r.FreshExecMs)
			return nil
		},
	}
	c.Flags().IntVar(&o.MB, "mb", 300, "MB the sandbox installs before the commit")
	c.Flags().StringVar(&o.Image, "image", "", "image (default: debian)")
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return c
}
