package agenttest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// StartedFirstRuns is how often CheckStartedFirst runs each command: the
// output of a command that prints at once races its start, so one run proves
// little.
const StartedFirstRuns = 200

// CheckStartedFirst runs commands that print at once in sandbox id through
// svc's streaming exec (one of them a terminal echoing its input before the
// program even reads it), runs times each, and fails the test if any run's
// first event is not "started", as the stream contract has it
// (session.Stream, docs/api-v1.md). It reports how many runs were out of
// order.
func CheckStartedFirst(t testing.TB, svc session.Service, id string, runs int) {
	t.Helper()
	cases := []struct {
		name string
		req  api.ExecRequest
		want string // in the output
	}{
		{"echo", api.ExecRequest{Shell: "echo hi"}, "hi"},
		{"stderr", api.ExecRequest{Shell: "echo hi >&2"}, "hi"},
		{"tty echoing its input", api.ExecRequest{Cmd: []string{"head", "-n1"}, TTY: true, Stdin: "typed\n"}, "typed"},
	}
	for _, c := range cases {
		late := 0
		var example []string
		for range runs {
			r := &streamEvents{}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			res, err := svc.ExecStream(ctx, id, c.req, session.Stream{
				Stdout:  r.writer("stdout"),
				Stderr:  r.writer("stderr"),
				Started: func(pid int) { r.add(fmt.Sprintf("started %d", pid), nil) },
			})
			cancel()
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("%s: %+v, %v", c.name, res, err)
			}
			evs, out := r.get()
			if !strings.Contains(out, c.want) {
				t.Fatalf("%s: output %q, want %q", c.name, out, c.want)
			}
			started := 0
			for _, ev := range evs {
				if strings.HasPrefix(ev, "started ") {
					started++
				}
			}
			if started != 1 {
				t.Fatalf("%s: events %v: %d started events, want one", c.name, evs, started)
			}
			if !strings.HasPrefix(evs[0], "started ") {
				late++
				example = evs
			}
		}
		if late > 0 {
			t.Errorf("%s: output before the started event in %d of %d runs (e.g. %v)", c.name, late, runs, example)
		}
	}
}

// streamEvents records a streaming exec's events in the order the stream got
// them.
type streamEvents struct {
	mu  sync.Mutex
	evs []string
	out strings.Builder
}

func (r *streamEvents) add(ev string, p []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, ev)
	r.out.Write(p)
}

func (r *streamEvents) get() ([]string, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.evs, r.out.String()
}

func (r *streamEvents) writer(typ string) writerFunc {
	return func(p []byte) (int, error) {
		r.add(typ, p)
		return len(p), nil
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
