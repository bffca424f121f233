package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// BaselineOptions run one bench with two dsec builds, interleaved: `dsec bench
// X --baseline OLD`.
type BaselineOptions struct {
	// Old and New are the two dsec binaries.
	Old, New string
	// Args are the bench's arguments after the binary (e.g. bench exec --n 5),
	// without --baseline and --rounds; --json is added where missing. A
	// --data-dir DIR becomes DIR-old and DIR-new, one for each side.
	Args []string
	// Rounds is the number of runs of each side: round i runs old then new
	// when i is even, new then old when odd (so a drift of the machine
	// weighs on both alike).
	Rounds int
	// Stderr receives the runs' standard error (progress, logs).
	Stderr io.Writer
}

// Figure is one numeric figure of a bench's JSON, the median over the rounds
// of each side, and their ratio.
type Figure struct {
	Name string  `json:"figure"`
	Old  float64 `json:"old"`
	New  float64 `json:"new"`
	// Ratio is new/old; absent when old is 0.
	Ratio float64 `json:"ratio_new_over_old,omitempty"`
}

// BaselineSide is one build's runs.
type BaselineSide struct {
	Binary string `json:"binary"`
	Commit string `json:"commit"`
	// Reports are the build's own JSON, one per round, as it printed it.
	Reports []json.RawMessage `json:"reports"`
}

// BaselineResult is what `dsec bench X --baseline OLD` reports.
type BaselineResult struct {
	Rounds int          `json:"rounds"`
	Order  []string     `json:"order"`
	Old    BaselineSide `json:"old"`
	New    BaselineSide `json:"new"`
	// Figures are every numeric figure both builds report (dotted paths into
	// their JSON, e.g. sides.dsec-api.p50_ms), plus process_wall_s and
	// process_cpu_s (user+system of the bench process and the children it
	// reaped), sorted by name.
	Figures []Figure `json:"figures"`
	// OnlyOld and OnlyNew are figures only one build reports (a renamed or new key).
	OnlyOld []string `json:"only_old,omitempty"`
	OnlyNew []string `json:"only_new,omitempty"`
}

// Baseline runs the bench with both builds, Rounds times each, interleaved,
// and compares every figure.
func Baseline(ctx context.Context, o BaselineOptions) (BaselineResult, error) {
	if o.Rounds <= 0 {
		o.Rounds = 1
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	res := BaselineResult{Rounds: o.Rounds, Old: BaselineSide{Binary: o.Old}, New: BaselineSide{Binary: o.New}}
	figs := map[string][]map[string]float64{}
	for i := range o.Rounds {
		order := []string{"old", "new"}
		if i%2 == 1 {
			order = []string{"new", "old"}
		}
		for _, side := range order {
			s := &res.Old
			if side == "new" {
				s = &res.New
			}
			raw, f, err := baselineRun(ctx, s.Binary, sideArgs(o.Args, side), o.Stderr)
			if err != nil {
				return res, fmt.Errorf("baseline round %d, %s build (%s): %w", i+1, side, s.Binary, err)
			}
			s.Reports = append(s.Reports, raw)
			figs[side] = append(figs[side], f)
			res.Order = append(res.Order, side)
		}
	}
	res.Old.Commit, res.New.Commit = reportCommit(res.Old.Reports[0]), reportCommit(res.New.Reports[0])
	res.Figures, res.OnlyOld, res.OnlyNew = compareFigures(figs["old"], figs["new"])
	return res, ctx.Err()
}

// sideArgs are args with --json and the side's own --data-dir.
func sideArgs(args []string, side string) []string {
	out := make([]string, 0, len(args)+1)
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--data-dir" && i+1 < len(args):
			out = append(out, a, args[i+1]+"-"+side)
			i++
		case strings.HasPrefix(a, "--data-dir="):
			out = append(out, a+"-"+side)
		default:
			out = append(out, a)
		}
	}
	if !slices.Contains(out, "--json") && !slices.Contains(out, "--json=true") {
		out = append(out, "--json")
	}
	return out
}

// baselineRun runs one bench process and returns its JSON and its numeric
// figures, with the process's wall and CPU time added.
func baselineRun(ctx context.Context, bin string, args []string, stderr io.Writer) (json.RawMessage, map[string]float64, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, stderr
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w", bin, strings.Join(args, " "), err)
	}
	wall := time.Since(t0)
	raw := lastJSONLine(out.Bytes())
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, nil, fmt.Errorf("%s %s printed no JSON object: %w", bin, strings.Join(args, " "), err)
	}
	for _, k := range EnvelopeKeys() {
		if k != "duration_s" {
			delete(v, k)
		}
	}
	f := map[string]float64{}
	flatten("", v, f)
	f["process_wall_s"] = round(wall.Seconds(), 3)
	f["process_cpu_s"] = round((cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds(), 3)
	return raw, f, nil
}

func lastJSONLine(b []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		if l := bytes.TrimSpace(lines[i]); len(l) > 0 && l[0] == '{' {
			return l
		}
	}
	return b
}

// flatten puts every number of v into f under its dotted path.
func flatten(path string, v any, f map[string]float64) {
	join := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch v := v.(type) {
	case float64:
		f[path] = v
	case map[string]any:
		for k, e := range v {
			flatten(join(k), e, f)
		}
	case []any:
		for i, e := range v {
			flatten(join(strconv.Itoa(i)), e, f)
		}
	}
}

func reportCommit(raw json.RawMessage) string {
	var e struct {
		Commit string `json:"commit"`
	}
	if json.Unmarshal(raw, &e) != nil || e.Commit == "" {
		return "unknown"
	}
	return e.Commit
}

// compareFigures takes each figure's median per side and their ratio.
func compareFigures(old, cur []map[string]float64) (figs []Figure, onlyOld, onlyNew []string) {
	medians := func(runs []map[string]float64) map[string]float64 {
		all := map[string][]float64{}
		for _, r := range runs {
			for k, v := range r {
				all[k] = append(all[k], v)
			}
		}
		m := map[string]float64{}
		for k, vs := range all {
			sort.Float64s(vs)
			if n := len(vs); n%2 == 1 {
				m[k] = vs[n/2]
			} else {
				m[k] = (vs[n/2-1] + vs[n/2]) / 2
			}
		}
		return m
	}
	mo, mn := medians(old), medians(cur)
	for _, k := range slices.Sorted(maps.Keys(mo)) {
		n, ok := mn[k]
		if !ok {
			onlyOld = append(onlyOld, k)
			continue
		}
		f := Figure{Name: k, Old: mo[k], New: n}
		if f.Old != 0 {
			f.Ratio = round(f.New/f.Old, 3)
		}
		figs = append(figs, f)
	}
	for _, k := range slices.Sorted(maps.Keys(mn)) {
		if _, ok := mo[k]; !ok {
			onlyNew = append(onlyNew, k)
		}
	}
	return figs, onlyOld, onlyNew
}
