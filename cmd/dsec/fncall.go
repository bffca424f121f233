package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/internal/cliflag"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

func fnCallCmd() *cobra.Command {
	var (
		lang, stdinPath, expectPath, memory, compare, image string
		files                                               []string
		cpu, wall                                           time.Duration
		asJSON                                              bool
	)
	c := &cobra.Command{
		Use:   "fncall --lang LANG --file SRC [--stdin FILE] [--expect FILE] [--time DUR] [--memory SIZE] [--json] [-- CMD...]",
		Short: "Run a program once, online-judge style (exit 0 when accepted, 1 otherwise, 75 on system_error)",
		Long: "Compiles (cached) and runs SRC in a fresh FnCall sandbox with stdin from --stdin and compares\n" +
			"stdout with --expect. With arguments after --, runs that raw command in /w instead of a language.",
		RunE: func(cmd *cobra.Command, args []string) error {
			req := api.FnCallRequest{Language: lang, Cmd: args, Files: map[string]string{}, Image: image}
			if len(args) > 0 {
				req.Language = ""
			}
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					return err
				}
				req.Files[filepath.Base(f)] = string(b)
			}
			t := api.FnCallTest{}
			if stdinPath != "" {
				b, err := os.ReadFile(stdinPath)
				if err != nil {
					return err
				}
				t.Stdin = string(b)
			}
			if expectPath != "" {
				b, err := os.ReadFile(expectPath)
				if err != nil {
					return err
				}
				s := string(b)
				t.ExpectedOutput = &s
			}
			if compare != "" {
				t.Compare = &api.FnCallCompare{Mode: compare}
			}
			req.Tests = []api.FnCallTest{t}
			req.Limits.CPUTimeMs = cpu.Milliseconds()
			req.Limits.WallTimeMs = wall.Milliseconds()
			mem, err := cliflag.ParseSize(memory)
			if err != nil {
				return err
			}
			req.Limits.MemoryBytes = mem
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			res, err := cl.FnCall(cmd.Context(), req)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(res); err != nil {
					return err
				}
			} else {
				printFnCall(res)
			}
			switch res.Verdict {
			case api.VerdictAccepted:
				return nil
			case api.VerdictSystemError:
				return exitError{75}
			default:
				return exitError{1}
			}
		},
	}
	c.Flags().StringVar(&lang, "lang", "", "language: python3, c, c++, go, bash, nodejs, php, ruby, lua, perl, rust, java, junit, typescript, kotlin_script, scala, r, csharp, racket, d, verilog, pytest")
	c.Flags().StringArrayVar(&files, "file", nil, "source or data file (repeatable); placed in /w under its base name")
	c.Flags().StringVar(&stdinPath, "stdin", "", "file fed to the program's stdin")
	c.Flags().StringVar(&expectPath, "expect", "", "expected stdout")
	c.Flags().StringVar(&compare, "compare", "", "exact, ignore_trailing_whitespace (default) or float")
	c.Flags().DurationVar(&cpu, "time", 0, "CPU time limit (default 2s)")
	c.Flags().DurationVar(&wall, "wall", 0, "wall time limit (default 2 x time + 1s)")
	c.Flags().StringVar(&memory, "memory", "", "memory limit, e.g. 256m (default 256 MiB)")
	c.Flags().StringVar(&image, "image", "", "environment (default judge)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the whole result as JSON")
	return c
}

func printFnCall(res api.FnCallResult) {
	if res.Compile != nil && res.Compile.Verdict != api.VerdictAccepted {
		fmt.Printf("compile: %s %s\n%s", res.Compile.Verdict, res.Compile.Message, res.Compile.Output)
	}
	for i, t := range res.Tests {
		extra := ""
		if t.TimeLimit != "" {
			extra = " (" + t.TimeLimit + ")"
		}
		fmt.Fprintf(os.Stderr, "test %d: %s%s  cpu %.1f ms  wall %.1f ms  peak %d KiB  exit %d %s %s\n",
			i+1, t.Verdict, extra, t.CPUTimeMs, t.WallTimeMs, t.PeakMemoryBytes>>10, t.ExitCode, t.Signal, t.Message)
		fmt.Print(t.Stdout)
		fmt.Fprint(os.Stderr, t.Stderr)
	}
	fmt.Fprintln(os.Stderr, "verdict:", res.Verdict)
}
