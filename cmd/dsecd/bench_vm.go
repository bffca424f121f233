package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/internal/bench"
	"github.com/dsec-dev/dsec/internal/bench/vmbench"
)

// benchVMCmd is `dsec bench vm --backend microvm`.
func benchVMCmd() *cobra.Command {
	var o vmbench.Options
	var asJSON bool
	var backend string
	c := &cobra.Command{
		Use:   "vm",
		Short: "microVM create → first exec (restored from a snapshot, and booted) vs the floor boot (interleaved), exec true, pause/resume, idle memory with/without free page reporting",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if backend == "fullvm" {
				return benchFullVM(cmd, o, asJSON)
			}
			if backend != "microvm" {
				return fmt.Errorf("bench vm: backend %q is not benchmarked here (microvm, fullvm)", backend)
			}
			r, err := vmbench.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			if asJSON {
				return bench.EncodeJSON(cmd.Context(), os.Stdout, r)
			}
			fmt.Printf("acceleration: %s (%s)\n", r.Accel, r.AccelReason)
			fmt.Printf("floor boot            p50 %8.1f ms  p99 %8.1f ms\n", r.Floor.P50ms, r.Floor.P99ms)
			fmt.Printf("create → first exec   p50 %8.1f ms  p99 %8.1f ms  (%.2fx / %.2fx the floor; target <= 1.3x) restored from the launch's snapshot in %d of %d\n",
				r.CreateExec.P50ms, r.CreateExec.P99ms, r.RatioP50, r.RatioP99, r.Restored, r.CreateExec.N)
			fmt.Printf("  booted (no snapshot) p50 %8.1f ms  p99 %8.1f ms  (%.2fx / %.2fx the floor)\n",
				r.BootExec.P50ms, r.BootExec.P99ms, r.BootRatioP50, r.BootRatioP99)
			fmt.Printf("  QEMU unconfined      p50 %8.1f ms  p99 %8.1f ms  (confined / unconfined p50 %.2fx)\n",
				r.UnconfinedExec.P50ms, r.UnconfinedExec.P99ms, r.ConfinedRatioP50)
			fmt.Printf("  snapshot: %.1f MiB, taken in %.0f ms (after the launch's first create, in the background)\n", r.SnapshotMiB, r.SnapshotMs)
			fmt.Printf("exec true             p50 %8.2f ms  p99 %8.2f ms\n", r.ExecTrue.P50ms, r.ExecTrue.P99ms)
			fmt.Printf("pause / resume        p50 %8.2f ms / %.2f ms\n", r.Pause.P50ms, r.Resume.P50ms)
			fmt.Printf("idle host memory/VM   PSS %.1f MiB (RSS %.1f) with free page reporting, PSS %.1f MiB (RSS %.1f) without (guest %d MiB)\n",
				r.IdlePSSFPRMiB, r.IdleRSSFPRMiB, r.IdlePSSNoMiB, r.IdleRSSNoMiB, r.GuestMemMiB)
			fmt.Printf("idle restored VM      PSS %.1f MiB (RSS %.1f)\n", r.IdlePSSRestoredMiB, r.IdleRSSRestoredMiB)
			fmt.Printf("idle VMs in 24 GiB    %d (%d without free page reporting)\n", r.FitIn24GiB, r.FitIn24GiBNo)
			for _, t := range r.Traces {
				fmt.Println(t)
			}
			return nil
		},
	}
	c.Flags().StringVar(&backend, "backend", "microvm", "backend (microvm, fullvm)")
	c.Flags().IntVar(&o.N, "n", 10, "create rounds, each interleaved with one floor boot")
	c.Flags().StringVar(&o.Image, "image", "busybox", "image")
	c.Flags().StringVar(&o.ImagesDir, "images-dir", os.Getenv("DSEC_IMAGES_DIR"), "image directory (default $DSEC_IMAGES_DIR or /var/lib/dsec/images)")
	c.Flags().Int64Var(&o.MemoryMiB, "memory-mib", 512, "guest memory")
	c.Flags().IntVar(&o.IdleVMs, "idle-vms", 3, "VMs per idle-memory phase (at most 4)")
	c.Flags().DurationVar(&o.IdleWait, "idle-wait", 0, "idle time before measuring memory (default 30s)")
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	c.Flags().BoolVar(&o.Trace, "trace", false, "record each round's boot timeline: host steps and the guest agent's (ms)")
	return c
}
