package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

func trajCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "traj",
		Short: "Trajectory logs: list, show, export, delete, rebuild",
		Long: `A trajectory is a sequence of session operations tagged with a trajectory ID and
step numbers (dsec exec --traj T --step N, or the X-Dsec-Trajectory and X-Dsec-Step
headers). The server logs every step durably; a re-issued step is answered from the
log without running again.`,
	}
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List trajectories",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			list, err := cl.ListTrajectories(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(os.Stdout).Encode(list)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSANDBOX\tSTEPS\tLAST\tUPDATED")
			for _, t := range list {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", t.ID, t.SandboxID, t.StepCount, t.LastStep,
					time.Since(t.UpdatedAt).Round(time.Second).String()+" ago")
			}
			return tw.Flush()
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	show := &cobra.Command{
		Use:   "show TRAJ",
		Short: "Show a trajectory's steps",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			t, err := cl.GetTrajectory(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(t)
			}
			fmt.Printf("trajectory %s: sandbox %s, %d steps (last %d), rebuilds %d\n", t.ID, t.SandboxID, t.StepCount, t.LastStep, t.Rebuilds)
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "STEP\tOP\tSTATE\tSTATUS\tMS\tARGS\tRESULT")
			for _, st := range t.Steps {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%.1f\t%s\t%s\n", st.Step, st.Op, st.State, st.Status, st.DurationMs,
					clip(string(st.Args), 60), clip(summary(st), 60))
			}
			return tw.Flush()
		},
	}
	show.Flags().BoolVar(&asJSON, "json", false, "print the trajectory and its steps as JSON")
	export := &cobra.Command{
		Use:   "export TRAJ",
		Short: "Print a trajectory as JSON lines, one step per line",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			return cl.ExportTrajectory(cmd.Context(), args[0], os.Stdout)
		},
	}
	rm := &cobra.Command{
		Use:   "rm TRAJ [TRAJ...]",
		Short: "Delete trajectory logs",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			for _, id := range args {
				if err := cl.DeleteTrajectory(cmd.Context(), id); err != nil {
					return err
				}
			}
			return nil
		},
	}
	rebuild := &cobra.Command{
		Use:   "rebuild TRAJ",
		Short: "Replay a trajectory's logged steps onto a fresh sandbox (its sandbox must be lost)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			r, err := cl.RebuildTrajectory(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(os.Stdout).Encode(r)
			}
			fmt.Printf("trajectory %s: sandbox %s replaces %s; %d steps re-executed, %d mismatched\n",
				r.Trajectory, r.SandboxID, r.OldSandbox, r.Reexecuted, r.Mismatched)
			for _, st := range r.Steps {
				m := ""
				if st.Action == "reexecuted" {
					m = map[bool]string{true: "matched", false: "MISMATCH"}[st.Matched]
				}
				fmt.Printf("  step %d %s: %s %s %s\n", st.Step, st.Op, st.Action, m, st.Detail)
			}
			return nil
		},
	}
	rebuild.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.AddCommand(ls, show, export, rm, rebuild)
	return c
}

func summary(st api.TrajectoryStep) string {
	if len(st.Result) > 0 {
		return string(st.Result)
	}
	if st.Truncated {
		return fmt.Sprintf("%d bytes (not kept)", st.BodySize)
	}
	return fmt.Sprintf("%d bytes", st.BodySize)
}

func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", `\n`)
	if len(s) > n {
		return s[:n-3] + "..."
	}
	return s
}
