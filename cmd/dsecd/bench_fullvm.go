package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/internal/bench"
	"github.com/dsec-dev/dsec/internal/bench/vmbench"
)

// benchFullVM is `dsec bench vm --backend fullvm`: create → create answers
// (the desktop image's desktop drawn) and → desktop visible in a screenshot,
// one VM at a time (--n, default 10 there; 3 is plenty).
func benchFullVM(cmd *cobra.Command, o vmbench.Options, asJSON bool) error {
	r, err := vmbench.RunFullVM(cmd.Context(), o)
	if err != nil {
		return err
	}
	if asJSON {
		return bench.EncodeJSON(cmd.Context(), os.Stdout, r)
	}
	fmt.Printf("acceleration: %s (%s), guest %d MiB\n", r.Accel, r.AccelReason, r.GuestMemMiB)
	fmt.Printf("create answers                 p50 %9.1f ms  p99 %9.1f ms\n", r.CreateAgent.P50ms, r.CreateAgent.P99ms)
	fmt.Printf("create → desktop in screenshot p50 %9.1f ms  p99 %9.1f ms  (runs %v ms)\n", r.CreateScreen.P50ms, r.CreateScreen.P99ms, r.RunsMs)
	fmt.Printf("screenshot                     p50 %9.1f ms\n", r.Screenshot.P50ms)
	return nil
}
