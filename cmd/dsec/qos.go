package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/internal/cliflag"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// pauseCmd is `dsec pause [--reclaim] ID`.
func pauseCmd() *cobra.Command {
	var reclaim, asJSON bool
	c := &cobra.Command{
		Use:   "pause [--reclaim] ID",
		Short: "Freeze every process of a sandbox; --reclaim also pushes its memory out of RAM",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			if !reclaim {
				_, err = cl.Pause(cmd.Context(), args[0])
				return err
			}
			res, err := cl.PauseReclaim(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(os.Stdout).Encode(res)
			}
			r := res.Reclaim
			if r == nil {
				return nil
			}
			fmt.Printf("reclaimed: %s to swap, %s page cache dropped; resident %s -> %s (%s, %.0f ms)\n",
				cliflag.HumanBytes(r.SwappedBytes), cliflag.HumanBytes(r.PageCacheDroppedBytes),
				cliflag.HumanBytes(r.ResidentBeforeBytes), cliflag.HumanBytes(r.ResidentAfterBytes), r.Method, r.DurationMs)
			if r.Note != "" {
				fmt.Println(r.Note)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&reclaim, "reclaim", false, "push the frozen sandbox's memory into swap (page cache only without swap); resume prefetches it")
	c.Flags().BoolVar(&asJSON, "json", false, "print the answer as JSON")
	return c
}

// cpuClassCmd is `dsec cpu-class ID ls|be`.
func cpuClassCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cpu-class ID ls|be",
		Short: "Change a sandbox's CPU class: ls (latency-sensitive) or be (best-effort, idle to the scheduler)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[1] != api.CPUClassLS && args[1] != api.CPUClassBE {
				return fmt.Errorf("cpu class %q: want ls or be", args[1])
			}
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			_, err = cl.SetCPUClass(cmd.Context(), args[0], args[1])
			return err
		},
	}
}
