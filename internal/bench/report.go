package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"
)

// SchemaVersion is the version of the JSON every `dsec bench X --json` prints:
// a Report, snake_case keys with the unit in the name (p50_ms, creates_per_s,
// bytes).
const SchemaVersion = 1

// Machine is the host a bench ran on.
type Machine struct {
	CPUModel    string `json:"cpu_model"`
	NProc       int    `json:"nproc"`
	MemoryBytes int64  `json:"memory_bytes"`
}

// Envelope is what every bench's JSON carries besides its own figures: which
// bench, on what, from which build, and how busy the host was.
type Envelope struct {
	SchemaVersion int       `json:"schema_version"`
	Bench         string    `json:"bench"`
	Args          []string  `json:"args"`
	StartedAt     time.Time `json:"started_at"`
	DurationS     float64   `json:"duration_s"`
	// Commit is the dsec build's VCS revision ("-dirty" when built from a
	// modified tree), "unknown" when the build carries none.
	Commit    string  `json:"commit"`
	GoVersion string  `json:"go_version"`
	Kernel    string  `json:"kernel"`
	Machine   Machine `json:"machine"`
	// LoadAvgBefore and LoadAvgAfter are /proc/loadavg's 1, 5 and 15 minute
	// figures when the bench started and when it ended.
	LoadAvgBefore [3]float64 `json:"loadavg_before"`
	LoadAvgAfter  [3]float64 `json:"loadavg_after"`
}

// Report is one bench's JSON: one object with the shared envelope's keys
// first, then the bench's own result's (a struct; no key may be an
// envelope's), so readers of a bench's figures find them at the top level.
type Report struct {
	Envelope
	Result any
}

// MarshalJSON writes the envelope's keys and the result's in one object.
func (r Report) MarshalJSON() ([]byte, error) {
	env, err := json.Marshal(r.Envelope)
	if err != nil {
		return nil, err
	}
	res, err := json.Marshal(r.Result)
	if err != nil {
		return nil, err
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(res, &keys); err != nil {
		return nil, fmt.Errorf("bench %s: result %T is not a JSON object: %w", r.Bench, r.Result, err)
	}
	if len(keys) == 0 {
		return env, nil
	}
	for k := range keys {
		if slices.Contains(EnvelopeKeys(), k) {
			return nil, fmt.Errorf("bench %s: result %T has the envelope's key %q", r.Bench, r.Result, k)
		}
	}
	out := append(env[:len(env)-1:len(env)-1], ',')
	return append(out, res[1:]...), nil
}

// EnvelopeKeys are the JSON keys of the Envelope, which every bench's JSON has.
func EnvelopeKeys() []string {
	t := reflect.TypeFor[Envelope]()
	keys := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		k, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		keys = append(keys, k)
	}
	return keys
}

// Begin opens the envelope of a bench run: start time, machine, build and the
// load average before.
func Begin(name string, args []string) Envelope {
	return Envelope{
		SchemaVersion: SchemaVersion, Bench: name, Args: append([]string{}, args...),
		StartedAt: time.Now().UTC(), Commit: BuildCommit(), GoVersion: runtime.Version(),
		Kernel: kernelRelease(), Machine: hostMachine(), LoadAvgBefore: loadAvg3(),
	}
}

// Finish closes the envelope (duration, load average after) around result.
func (e Envelope) Finish(result any) Report {
	e.DurationS = round(time.Since(e.StartedAt).Seconds(), 3)
	e.LoadAvgAfter = loadAvg3()
	return Report{Envelope: e, Result: result}
}

type envelopeKey struct{}

// Start records in ctx that bench name begins now (see Begin); EncodeJSON
// with that ctx closes the envelope.
func Start(ctx context.Context, name string, args []string) context.Context {
	e := Begin(name, args)
	return context.WithValue(ctx, envelopeKey{}, &e)
}

// EncodeJSON writes result as one line of JSON in the shared schema: the
// envelope Start recorded in ctx (or one begun now) around result.
func EncodeJSON(ctx context.Context, w io.Writer, result any) error {
	e, ok := ctx.Value(envelopeKey{}).(*Envelope)
	if !ok {
		b := Begin("", nil)
		e = &b
	}
	return json.NewEncoder(w).Encode(e.Finish(result))
}

// ldCommit may be set at link time (-ldflags "-X
// github.com/dsec-dev/dsec/internal/bench.ldCommit=REV"), for builds made
// without VCS stamping (-buildvcs=false). It is the only package variable.
var ldCommit string

// BuildCommit is this build's revision: the VCS stamp Go put into the binary, else
// the one given at link time, else "unknown".
func BuildCommit() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev string
		var dirty bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if dirty {
				rev += "-dirty"
			}
			return rev
		}
	}
	if ldCommit != "" {
		return ldCommit
	}
	return "unknown"
}

func kernelRelease() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}

func hostMachine() Machine {
	m := Machine{NProc: runtime.NumCPU()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.CPUModel = procField(b, "model name")
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		kb, _ := strconv.ParseInt(strings.TrimSuffix(procField(b, "MemTotal"), " kB"), 10, 64)
		m.MemoryBytes = kb << 10
	}
	return m
}

// procField is the value of the first "key: value" line for key in a /proc file.
func procField(b []byte, key string) string {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func loadAvg3() [3]float64 {
	var la [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return la
	}
	for i, f := range strings.Fields(string(b)) {
		if i == 3 {
			break
		}
		v, _ := strconv.ParseFloat(f, 64)
		la[i] = math.Round(v*100) / 100
	}
	return la
}
