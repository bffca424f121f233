package agent_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// startedFirstRuns is how often each command of checkStartedFirst runs: the
// output of a command that prints at once races the start, so one run
// proves little.
const startedFirstRuns = 200

// streamEvents records a streaming exec's events in the order the stream got
// them, as a front end sends them on: "started", then "stdout"/"stderr".
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

func (r *streamEvents) stream(typ string) writerFunc {
	return func(p []byte) (int, error) {
		r.add(typ, p)
		return len(p), nil
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// checkStartedFirst runs commands that print at once (one of them a terminal
// echoing its input before the program even reads it) startedFirstRuns times
// each and fails if any run's first event is not "started", as the stream
// contract says (session.Stream, docs/api-v1.md).
func checkStartedFirst(t *testing.T, m *agent.Manager, id string) {
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
		for i := 0; i < startedFirstRuns; i++ {
			r := &streamEvents{}
			res, err := m.ExecStream(ctxT(t), id, c.req, session.Stream{
				Stdout:  r.stream("stdout"),
				Stderr:  r.stream("stderr"),
				Started: func(pid int) { r.add(fmt.Sprintf("started %d", pid), nil) },
			})
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("%s: %+v, %v", c.name, res, err)
			}
			r.mu.Lock()
			evs, out := r.evs, r.out.String()
			r.mu.Unlock()
			if !strings.Contains(out, c.want) {
				t.Fatalf("%s: output %q, want %q", c.name, out, c.want)
			}
			if n := count(evs, "started"); n != 1 {
				t.Fatalf("%s: events %v: %d started events, want one", c.name, evs, n)
			}
			if !strings.HasPrefix(evs[0], "started ") {
				late++
				example = evs
			}
		}
		if late > 0 {
			t.Errorf("%s: output before the started event in %d of %d runs (e.g. %v)", c.name, late, startedFirstRuns, example)
		}
	}
}

func count(evs []string, prefix string) int {
	n := 0
	for _, ev := range evs {
		if strings.HasPrefix(ev, prefix) {
			n++
		}
	}
	return n
}

func TestMockStreamStartedFirst(t *testing.T) {
	e := newMockEnv(t)
	m := e.open(t)
	sb := create(t, m, api.CreateSandboxRequest{})
	checkStartedFirst(t, m, sb.ID)
}

func TestStreamStartedFirst(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, nil)
	sb := create(t, m, api.CreateSandboxRequest{})
	checkStartedFirst(t, m, sb.ID)
}
