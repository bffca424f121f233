package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/internal/bench"
)

// addBaseline gives every bench under c `--baseline OLD_BINARY` and
// `--rounds N`: with --baseline, the bench is not run in this process but as
// `dsec bench X ... --json` of the old build and of this one, interleaved (see
// bench.Baseline), and every figure is reported for both with new/old.
func addBaseline(c *cobra.Command) {
	var old string
	var rounds int
	c.PersistentFlags().StringVar(&old, "baseline", "", "run this bench also with the dsec binary OLD_BINARY, interleaved with this build (each its own process and data dir), and report new/old per figure")
	c.PersistentFlags().IntVar(&rounds, "rounds", 3, "with --baseline: runs of each build")
	for _, sub := range c.Commands() {
		run := sub.RunE
		if run == nil {
			continue
		}
		sub.RunE = func(cmd *cobra.Command, args []string) error {
			if old == "" {
				return run(cmd, args)
			}
			return benchBaseline(cmd, old, rounds)
		}
	}
}

func benchBaseline(cmd *cobra.Command, old string, rounds int) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench --baseline: this binary: %w", err)
	}
	r, err := bench.Baseline(cmd.Context(), bench.BaselineOptions{Old: old, New: self, Rounds: rounds,
		Args: withoutBaselineFlags(os.Args[1:]), Stderr: os.Stderr})
	if err != nil {
		return err
	}
	if asJSON, _ := cmd.Flags().GetBool("json"); asJSON {
		return bench.EncodeJSON(cmd.Context(), os.Stdout, r)
	}
	fmt.Printf("%s: old %s (%s) vs new %s (%s), %d rounds each (%s)\n", cmd.CommandPath(),
		r.Old.Binary, r.Old.Commit, r.New.Binary, r.New.Commit, r.Rounds, strings.Join(r.Order, ", "))
	fmt.Printf("%-48s %14s %14s %9s\n", "figure (median)", "old", "new", "new/old")
	for _, f := range r.Figures {
		ratio := "-"
		if f.Ratio != 0 {
			ratio = fmt.Sprintf("%.3f", f.Ratio)
		}
		fmt.Printf("%-48s %14.6g %14.6g %9s\n", f.Name, f.Old, f.New, ratio)
	}
	if len(r.OnlyOld) > 0 {
		fmt.Println("only the old build reports:", strings.Join(r.OnlyOld, ", "))
	}
	if len(r.OnlyNew) > 0 {
		fmt.Println("only the new build reports:", strings.Join(r.OnlyNew, ", "))
	}
	return nil
}

// withoutBaselineFlags is args without --baseline and --rounds (and their
// values), which the runs of each build do not get.
func withoutBaselineFlags(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, _, hasValue := strings.Cut(a, "=")
		if name == "--baseline" || name == "--rounds" {
			if !hasValue {
				i++
			}
			continue
		}
		out = append(out, a)
	}
	return out
}
