package main

import (
	"bytes"
	"context"
	"encoding"
	"encoding/json"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/bench"
	"github.com/dsec-dev/dsec/internal/bench/placebench"
	"github.com/dsec-dev/dsec/internal/bench/vmbench"
)

// benchResults are the results each `dsec bench X --json` prints, by X: every
// bench subcommand must be listed here (TestBenchJSONSchema fails otherwise).
var benchResults = map[string][]any{
	"create":        {bench.CreateResult{}, bench.CompareResult{}, bench.EgressResult{}},
	"exec":          {bench.ExecResult{}},
	"pty":           {bench.PTYResult{}},
	"density":       {bench.DensityResult{}},
	"metrics":       {bench.MetricsResult{}},
	"fncall":        {bench.FnCallResult{}},
	"traj":          {bench.TrajResult{}},
	"image":         {bench.ImageResult{}},
	"pull":          {bench.PullResult{}},
	"placement":     {placebench.Result{}},
	"fork":          {bench.ForkResult{}},
	"commit":        {bench.CommitResult{}},
	"burst":         {bench.BurstResult{}},
	"sandboxfusion": {bench.SandboxFusionResult{}},
	"cycle":         {bench.CycleResult{}},
	"qos":           {bench.QoSResult{}},
	"reclaim":       {bench.ReclaimResult{}},
	"cluster":       {bench.ClusterResult{}},
	"vm":            {vmbench.Result{}, vmbench.FullVMResult{}},
}

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// jsonKeys calls bad for every JSON key of type t (recursively: nested
// structs, slices, maps' values, embedded structs) that is not snake_case.
func jsonKeys(t reflect.Type, path string, seen map[reflect.Type]bool, bad func(path string)) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] || t == reflect.TypeFor[time.Time]() {
		return
	}
	if t.Implements(reflect.TypeFor[json.Marshaler]()) || t.Implements(reflect.TypeFor[encoding.TextMarshaler]()) {
		return
	}
	seen[t] = true
	defer delete(seen, t)
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" && f.Anonymous {
			jsonKeys(f.Type, path, seen, bad)
			continue
		}
		if name == "" {
			name = f.Name
		}
		if !snakeCase.MatchString(name) {
			bad(path + name)
		}
		jsonKeys(f.Type, path+name+".", seen, bad)
	}
}

// TestBenchJSONSchema checks that every bench prints the shared envelope
// (bench, machine, kernel, load averages, commit, start time) around its
// result, and that every key of every bench's result is snake_case.
func TestBenchJSONSchema(t *testing.T) {
	for _, c := range benchCmd().Commands() {
		if _, ok := benchResults[c.Name()]; !ok && c.Name() != "help" && c.Name() != "completion" {
			t.Errorf("bench %s: its result types are not listed in benchResults", c.Name())
		}
	}
	for _, name := range slices.Sorted(mapsKeys(benchResults)) {
		for _, r := range benchResults[name] {
			rt := reflect.TypeOf(r)
			jsonKeys(rt, "", map[reflect.Type]bool{}, func(p string) {
				t.Errorf("bench %s: %s: key %q is not snake_case", name, rt, p)
			})
			var buf bytes.Buffer
			ctx := bench.Start(context.Background(), name, []string{"--n", "5"})
			if err := bench.EncodeJSON(ctx, &buf, r); err != nil {
				t.Fatalf("bench %s: %v", name, err)
			}
			var got map[string]any
			if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
				t.Fatalf("bench %s: %v: %s", name, err, buf.Bytes())
			}
			checkEnvelope(t, name, got)
			for _, k := range topKeys(rt) {
				if slices.Contains(bench.EnvelopeKeys(), k) {
					t.Errorf("bench %s: %s has the envelope's key %q", name, rt, k)
				} else if _, ok := got[k]; !ok && !omitEmpty(rt, k) {
					t.Errorf("bench %s: key %q of %s missing: %s", name, k, rt, buf.Bytes())
				}
			}
		}
	}
}

// topKeys are the top-level JSON keys of struct type t.
func topKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" || !f.IsExported() && !f.Anonymous:
		case name == "" && f.Anonymous:
			keys = append(keys, topKeys(f.Type)...)
		case name == "":
			keys = append(keys, f.Name)
		default:
			keys = append(keys, name)
		}
	}
	return keys
}

// omitEmpty says whether top-level key k of t is left out when empty.
func omitEmpty(t reflect.Type, k string) bool {
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" && f.Anonymous && omitEmpty(f.Type, k) {
			return true
		}
		if name == k {
			return strings.Contains(opts, "omitempty")
		}
	}
	return false
}

func checkEnvelope(t *testing.T, name string, got map[string]any) {
	t.Helper()
	if got["bench"] != name || got["schema_version"] != float64(bench.SchemaVersion) {
		t.Errorf("bench %s: bench %v, schema_version %v", name, got["bench"], got["schema_version"])
	}
	for _, k := range []string{"commit", "kernel", "started_at", "go_version"} {
		if s, _ := got[k].(string); s == "" {
			t.Errorf("bench %s: %s empty or missing", name, k)
		}
	}
	if _, err := time.Parse(time.RFC3339, got["started_at"].(string)); err != nil {
		t.Errorf("bench %s: started_at: %v", name, err)
	}
	for _, k := range []string{"loadavg_before", "loadavg_after"} {
		if la, _ := got[k].([]any); len(la) != 3 {
			t.Errorf("bench %s: %s = %v, want 3 figures", name, k, got[k])
		}
	}
	m, _ := got["machine"].(map[string]any)
	if m == nil || m["cpu_model"] == "" || m["nproc"].(float64) < 1 || m["memory_bytes"].(float64) <= 0 {
		t.Errorf("bench %s: machine %v", name, got["machine"])
	}
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
