package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/dsec-dev/dsec/internal/progress"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// topOptions are dsec top's flags.
type topOptions struct {
	interval time.Duration
	limit    int
	sort     string // cpu or memory
	once     bool
}

func topCmd() *cobra.Command {
	o := topOptions{}
	c := &cobra.Command{
		Use:   "top",
		Short: "Live view of the nodes and the busiest sandboxes (CPU, memory); q quits. Piped: one plain snapshot",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			return runTop(cmd.Context(), cl, o, os.Stdin, os.Stdout)
		},
	}
	f := c.Flags()
	f.DurationVar(&o.interval, "interval", 2*time.Second, "refresh interval (and, for one snapshot, the CPU sampling window, at most 1s)")
	f.IntVarP(&o.limit, "limit", "n", 15, "sandboxes shown")
	f.StringVar(&o.sort, "sort", "cpu", "order of the busiest: cpu (share of a core) or memory")
	f.BoolVar(&o.once, "once", false, "print one snapshot and exit (the default when stdout is not a terminal)")
	return c
}

// runTop shows the live view when out is a terminal, else one plain snapshot.
func runTop(ctx context.Context, cl *client.Client, o topOptions, in, out *os.File) error {
	if o.interval < 100*time.Millisecond {
		return fmt.Errorf("--interval must be at least 100ms, got %v", o.interval)
	}
	if o.once || !progress.IsTerminal(out) {
		return topOnce(ctx, cl, o, out)
	}
	return topLive(ctx, cl, o, in, out)
}

func fetchTop(ctx context.Context, cl *client.Client, o topOptions) (api.Top, error) {
	var t api.Top
	q := url.Values{"limit": {strconv.Itoa(o.limit)}, "sort": {o.sort}}
	err := cl.GetJSON(ctx, "/ui/api/top", q, &t)
	return t, err
}

// topPulls are the image pulls in flight and the sandboxes waiting for
// them (state pulling, at most the view's limit).
type topPulls struct {
	pulls   []api.PullProgress
	waiting []api.Sandbox
}

// fetchPulls returns the image pulls in flight (none from a server that does
// not report them) and the sandboxes in state pulling.
func fetchPulls(ctx context.Context, cl *client.Client, o topOptions) topPulls {
	var p topPulls
	p.pulls, _ = cl.Pulls(ctx)
	if page, err := cl.ListPage(ctx, client.ListOptions{States: []string{api.StatePulling}, Limit: max(o.limit, 1)}); err == nil {
		p.waiting = page.Sandboxes
	}
	return p
}

// topOnce samples twice (CPU shares need two reads) and prints plain text.
func topOnce(ctx context.Context, cl *client.Client, o topOptions, out io.Writer) error {
	if _, err := fetchTop(ctx, cl, o); err != nil {
		return err
	}
	select {
	case <-time.After(min(o.interval, time.Second)):
	case <-ctx.Done():
		return ctx.Err()
	}
	t, err := fetchTop(ctx, cl, o)
	if err != nil {
		return err
	}
	renderTop(out, t, fetchPulls(ctx, cl, o))
	return nil
}

// topLive redraws every interval on the alternate screen until q, Q or ^C;
// c and m switch the order to CPU or memory.
func topLive(ctx context.Context, cl *client.Client, o topOptions, in, out *os.File) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	keys := make(chan byte, 8)
	if term.IsTerminal(int(in.Fd())) {
		old, err := term.MakeRaw(int(in.Fd()))
		if err != nil {
			return fmt.Errorf("terminal raw mode: %w", err)
		}
		defer term.Restore(int(in.Fd()), old)
		go func() {
			buf := make([]byte, 16)
			for {
				n, err := in.Read(buf)
				for _, k := range buf[:n] {
					keys <- k
				}
				if err != nil {
					close(keys)
					return
				}
			}
		}()
	}
	fmt.Fprint(out, "\x1b[?1049h\x1b[?25l") // alternate screen, no cursor
	defer fmt.Fprint(out, "\x1b[?25h\x1b[?1049l")
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	for {
		var frame bytes.Buffer
		t, err := fetchTop(ctx, cl, o)
		if err != nil {
			fmt.Fprintf(&frame, "dsec top: %v\n", err)
		} else {
			renderTop(&frame, t, fetchPulls(ctx, cl, o))
		}
		fmt.Fprintf(&frame, "\n%s  every %v  [q] quit  [c] by CPU  [m] by memory\n", time.Now().Format("15:04:05"), o.interval)
		cols, rows, err := term.GetSize(int(out.Fd()))
		if err != nil {
			cols, rows = 120, 40
		}
		fmt.Fprint(out, "\x1b[H\x1b[2J"+fitScreen(frame.String(), cols, rows))
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case k, ok := <-keys:
			switch {
			case !ok || k == 'q' || k == 'Q' || k == 3:
				return nil
			case k == 'c':
				o.sort = "cpu"
			case k == 'm':
				o.sort = "memory"
			}
		}
	}
}

// fitScreen cuts text to the screen and ends lines with \r\n (raw mode).
func fitScreen(s string, cols, rows int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > rows-1 {
		lines = lines[:rows-1]
	}
	for i, l := range lines {
		if len(l) > cols {
			lines[i] = l[:cols]
		}
	}
	return strings.Join(lines, "\r\n")
}

// renderTop writes the nodes, the sandbox counts, the busiest sandboxes, the
// sandboxes waiting for their image and the image pulls in flight.
func renderTop(w io.Writer, t api.Top, p topPulls) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tCPUS\tLOAD\tMEMORY AVAILABLE\tSANDBOXES\tRUNNING\tCPU ALLOCATED\tMEMORY ALLOCATED")
	for _, n := range t.Nodes {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%s / %s\t%d\t%d\t%.1f\t%s\n", n.Name, n.CPUs, n.Load1,
			progress.Bytes(n.MemoryAvailableBytes), progress.Bytes(n.MemoryBytes), n.Sandboxes, n.Running,
			n.CPUAllocated, progress.Bytes(n.MemoryAllocatedBytes))
	}
	tw.Flush()
	s := t.Sandboxes
	fmt.Fprintf(w, "\nsandboxes: %d (running %d, paused %d, exited %d", s.Total,
		s.ByState["running"], s.ByState["paused"], s.ByState["exited"])
	for _, st := range []string{api.StatePulling, api.StateFailed} {
		if n := s.ByState[st]; n > 0 {
			fmt.Fprintf(w, ", %s %d", st, n)
		}
	}
	fmt.Fprint(w, ")\n\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "SANDBOX\tSTATE\tBACKEND\tCPU%%\tCPU TIME\tMEMORY\tMEMORY LIMIT\t(by %s)\n", t.SortBy)
	for _, u := range t.Busiest {
		cpu, cpuTime, mem := "-", "-", "-"
		if u.CPUPercent != nil {
			cpu = fmt.Sprintf("%.1f", *u.CPUPercent)
		}
		if u.CPUSeconds >= 0 {
			cpuTime = (time.Duration(u.CPUSeconds * float64(time.Second))).Round(10 * time.Millisecond).String()
		}
		if u.MemoryBytes >= 0 {
			mem = progress.Bytes(u.MemoryBytes)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", u.ID, u.State, u.Backend, cpu, cpuTime, mem, progress.Bytes(u.MemoryLimitBytes))
	}
	tw.Flush()
	renderWaiting(w, p.waiting)
	if len(p.pulls) == 0 {
		return
	}
	fmt.Fprintf(w, "\nimage pulls: %d\n\n", len(p.pulls))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PULL\tNODE\tPHASE\tLAYERS DONE\tFETCHED")
	for _, pr := range p.pulls {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", pr.Ref, pr.Node, pr.Phase, layersDone(pr), pullBytes(pr))
	}
	tw.Flush()
}

// renderWaiting lists the sandboxes in state pulling with their pull's
// progress (none: no section).
func renderWaiting(w io.Writer, waiting []api.Sandbox) {
	if len(waiting) == 0 {
		return
	}
	fmt.Fprintf(w, "\nsandboxes pulling their image: %d\n\n", len(waiting))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SANDBOX\tIMAGE\tPHASE\tLAYERS DONE\tFETCHED")
	for _, sb := range waiting {
		phase, layers, fetched := api.PullResolving, "-", "-"
		if pr := sb.Pull; pr != nil {
			phase, layers, fetched = pr.Phase, layersDone(*pr), pullBytes(*pr)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", sb.ID, sb.Image, phase, layers, fetched)
	}
	tw.Flush()
}

// layersDone is "DONE/ALL" of a pull's layers.
func layersDone(p api.PullProgress) string {
	done := 0
	for _, l := range p.Layers {
		if l.Phase == api.PullDone {
			done++
		}
	}
	return fmt.Sprintf("%d/%d", done, len(p.Layers))
}

// pullBytes is "FETCHED / TOTAL" of a pull (compressed bytes).
func pullBytes(p api.PullProgress) string {
	return progress.Bytes(p.FetchedBytes) + " / " + progress.Bytes(p.TotalBytes)
}
