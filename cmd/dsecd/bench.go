package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/internal/bench"
	"github.com/dsec-dev/dsec/internal/cliflag"
	"github.com/dsec-dev/dsec/internal/progress"
)

func benchCmd() *cobra.Command {
	var runCtx context.Context // the running subcommand's, for print's JSON envelope
	c := &cobra.Command{Use: "bench", Short: "Benchmarks (each starts a private node in a scratch dir)",
		// Runs draw a progress bar on stderr when it is a terminal; the
		// envelope of the JSON (start time, load average before) opens here.
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			ctx := progress.WithOutput(cmd.Context(), os.Stderr)
			runCtx = bench.Start(ctx, cmd.Name(), os.Args[1:])
			cmd.SetContext(runCtx)
		}}
	var asJSON bool
	var compare string
	var batch int
	var noCLI, inProcess bool
	var netAllow []string
	addFlags := func(cmd *cobra.Command, o *bench.Options, n, p int) {
		cmd.Flags().IntVar(&o.N, "n", n, "number of operations / sandboxes")
		cmd.Flags().IntVar(&o.Parallel, "parallel", p, "concurrent workers")
		cmd.Flags().StringVar(&o.Image, "image", "", "image (default: debian)")
		cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	}
	var co, eo, do bench.Options
	print := func(v any, human func()) error {
		if asJSON {
			return bench.EncodeJSON(runCtx, os.Stdout, v)
		}
		human()
		return nil
	}
	create := &cobra.Command{
		Use:   "create",
		Short: "Create+start N idle sandboxes; --compare crun,runc runs peers on the same rootfs",
		RunE: func(cmd *cobra.Command, _ []string) error {
			var peers []string
			if compare != "" {
				peers = strings.Split(compare, ",")
			}
			if p := cliflag.NetworkPolicy(netAllow, nil); p != nil {
				return benchEgress(cmd, co, *p, print)
			}
			if !inProcess && co.UserNS == "" {
				return benchCreateCompare(cmd, bench.CompareOptions{N: co.N, Parallel: co.Parallel, Batch: batch, Image: co.Image,
					Peers: peers, NoCLI: noCLI}, print)
			}
			r, err := bench.Create(cmd.Context(), co, peers)
			if err != nil {
				return err
			}
			return print(r, func() {
				fmt.Printf("dsec: %d creates, %.1f/s, p50 %.2f ms, p99 %.2f ms, teardown %.2f s, failures %d\n",
					r.N, r.CreatesPerS, r.P50ms, r.P99ms, r.TeardownS, r.Failures)
				if u := r.UserNS; u != nil {
					fmt.Printf("user namespace: p50 %.2f ms on vs %.2f ms off (mean %.2f vs %.2f), cost %+.1f%% (%d each, interleaved)\n",
						u.OnP50ms, u.OffP50ms, u.OnMeanms, u.OffMeanms, u.CostPct, u.N)
				}
				for name, p := range r.Peers {
					fmt.Printf("%s: %.1f/s, p50 %.2f ms, p99 %.2f ms (%s)\n", name, p.PerSecond, p.P50ms, p.P99ms, p.Note)
				}
				if r.RatioVsCrun > 0 {
					fmt.Printf("dsec/crun: %.2fx\n", r.RatioVsCrun)
				}
				if r.RatioVsRunc > 0 {
					fmt.Printf("dsec/runc: %.2fx\n", r.RatioVsRunc)
				}
			})
		},
	}
	addFlags(create, &co, 200, 2)
	create.Flags().StringVar(&compare, "compare", "", "peers to run in the same benchmark, doing the same work: crun, runc, podman (podman is skipped, and said so, where it cannot run)")
	create.Flags().IntVar(&batch, "batch", 10, "creates per side per turn (sides take turns: dsec-api, dsec-cli, peers, dsec-api, ...)")
	create.Flags().BoolVar(&noCLI, "no-cli", false, "leave out the CLI side (a `dsec create` process per sandbox)")
	create.Flags().BoolVar(&inProcess, "in-process", false, "the old form: dsec's agent called in-process (no HTTP), peers after it (also with --userns)")
	create.Flags().StringVar(&co.UserNS, "userns", "", "user_namespace of the creates: on, off, or both (alternate in one run and compare); default the node's")
	create.Flags().StringArrayVar(&netAllow, "network", nil, "compare with egress sandboxes allowed CIDR[:PORT[-PORT]] (passes default, egress, default, egress)")
	exec := &cobra.Command{
		Use:   "exec",
		Short: "Run `true` N times through the HTTP API",
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := bench.Exec(cmd.Context(), eo)
			if err != nil {
				return err
			}
			return print(r, func() {
				fmt.Printf("exec true via API: %d execs, %.1f/s, p50 %.2f ms, p99 %.2f ms, failures %d\n",
					r.N, r.ExecsPerS, r.P50ms, r.P99ms, r.Failures)
			})
		},
	}
	addFlags(exec, &eo, 500, 1)
	var po bench.Options
	ptyc := &cobra.Command{
		Use:   "pty",
		Short: "Type N keystrokes one at a time into a terminal exec and time each one's echo through the API",
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := bench.PTY(cmd.Context(), po)
			if err != nil {
				return err
			}
			return print(r, func() {
				fmt.Printf("pty keystroke echo via API: %d keys, p50 %.2f ms, p99 %.2f ms, max %.2f ms, failures %d (exec true on the same node: p50 %.2f ms, p99 %.2f ms)\n",
					r.N, r.P50ms, r.P99ms, r.Maxms, r.Failures, r.ExecTrueP50ms, r.ExecTrueP99ms)
			})
		},
	}
	addFlags(ptyc, &po, 200, 1)
	_ = ptyc.Flags().MarkHidden("parallel") // keystrokes go one at a time
	density := &cobra.Command{
		Use:   "density",
		Short: "Hold N idle sandboxes at once; report memory per sandbox and teardown time",
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := bench.Density(cmd.Context(), do)
			if err != nil {
				return err
			}
			return print(r, func() {
				fmt.Printf("%d/%d idle sandboxes, %d KiB each (%d MiB total, slab %d MiB), create %.1f s, teardown %.1f s\n",
					r.Sandboxes, r.Requested, r.BytesPerSandbox>>10, r.TotalBytes>>20, r.SlabBytes>>20, r.CreateS, r.TeardownS)
				fmt.Printf("create rate: first %.1f/s, last %.1f/s, at 2,400 live %.1f/s; %.2f memcgs and %d superblocks (%s) per sandbox\n",
					r.FirstRate, r.LastRate, r.RateAt2400, r.MemcgsPerSandbox, r.SuperblocksPerSandbox, r.Filesystems)
				fmt.Printf("memcg shrinker table: %.0f KiB per memcg (about %.0f superblocks high-water on this boot)\n",
					r.ShrinkerUnitsPerMemcg, 64*r.ShrinkerUnitsPerMemcg)
				for _, s := range r.SlabTop {
					fmt.Printf("  slab %-24s %8d B/sandbox (%.1f objects)\n", s.Cache, s.BytesPerSandbox, s.ObjsPerSandbox)
				}
				if r.StoppedBy != "" {
					fmt.Println("stopped by:", r.StoppedBy)
				}
			})
		},
	}
	addFlags(density, &do, 1000, 4)
	var mo bench.Options
	var scrapes int
	mc := &cobra.Command{
		Use:   "metrics",
		Short: "Hold N idle sandboxes and time GET /metrics; report its size",
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := bench.Metrics(cmd.Context(), mo, scrapes)
			if err != nil {
				return err
			}
			return print(r, func() {
				fmt.Printf("/metrics with %d sandboxes: first scrape %.1f ms, then p50 %.1f ms, p99 %.1f ms, max %.1f ms over %d scrapes; %d bytes (create %.1f s)\n",
					r.Sandboxes, r.FirstMs, r.P50ms, r.P99ms, r.Maxms, r.Scrapes, r.Bytes, r.CreateS)
				if r.StoppedBy != "" {
					fmt.Println("stopped by:", r.StoppedBy)
				}
			})
		},
	}
	addFlags(mc, &mo, 3200, 4)
	mc.Flags().IntVar(&scrapes, "scrapes", 50, "scrapes after the first")
	mc.Flags().StringVar(&mo.DataDir, "data-dir", "", "the node's data dir, kept (default: a new one under /var/lib/dsec, removed afterwards)")
	var fo bench.Options
	var fLang string
	fn := &cobra.Command{
		Use:   "fncall",
		Short: "Compile hello world once, run it N times via the FnCall engine vs bare, then N calls in parallel",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if fo.Image == "" {
				fo.Image = "judge"
			}
			r, err := bench.FnCall(cmd.Context(), fo, fLang)
			if err != nil {
				return err
			}
			return print(r, func() {
				fmt.Printf("fncall %s: %d calls, %.1f calls/s (%d workers; bare %.1f/s, ratio %.2f), p50 %.3f ms (bare %.3f ms, ratio %.2f), p99 %.3f ms, failures %d\n",
					r.Language, r.N, r.CallsPerS, r.Parallel, r.BareCallsPerS, r.ThroughputRatio, r.P50ms, r.BareP50ms, r.OverheadRatio, r.P99ms, r.Failures)
				fmt.Printf("  note: %s\n", r.Prepared)
			})
		},
	}
	addFlags(fn, &fo, 500, 4)
	fn.Flags().StringVar(&fLang, "lang", "c", "language: c, c++, go, python3, bash, nodejs, perl, rust")
	c.AddCommand(create, exec, ptyc, density, mc, fn)
	c.AddCommand(benchTrajCmd(), benchImageCmd(), benchPullCmd(), benchPlacementCmd(), benchForkCmd(), benchCommitCmd(), benchBurstCmd(), benchCycleCmd())
	c.AddCommand(benchQoSCmds()...)
	c.AddCommand(benchClusterCmd(), benchSandboxFusionCmd())
	c.AddCommand(benchVMCmd())
	addBaseline(c)
	return c
}
