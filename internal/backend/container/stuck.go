package container

import (
	"fmt"
	"os"
	"strings"

	"github.com/dsec-dev/dsec/internal/cgroups"
)

// stuckReport describes why a killed sandbox's init has not exited: its own
// state and kernel wait channel, and those of every process still in the
// sandbox's cgroup (an init whose pid namespace still holds a task it cannot
// reap, or a task in uninterruptible sleep, cannot finish exiting). It goes into
// the destroy error and the log, so a hang that happens once under load can be
// diagnosed afterwards.
func stuckReport(pid int, cg *cgroups.Group) string {
	var b strings.Builder
	fmt.Fprintf(&b, "init %d: %s", pid, taskSummary(pid))
	if cg == nil {
		return b.String()
	}
	procs, err := cg.Procs()
	if err != nil {
		fmt.Fprintf(&b, "; cgroup procs: %v", err)
		return b.String()
	}
	const most = 8
	fmt.Fprintf(&b, "; %d in cgroup", len(procs))
	for i, p := range procs {
		if i == most {
			fmt.Fprintf(&b, "; ...")
			break
		}
		if p != pid {
			fmt.Fprintf(&b, "; %d: %s", p, taskSummary(p))
		}
	}
	return b.String()
}

// taskSummary is "name state wchan" from /proc (each part "?" when unreadable).
func taskSummary(pid int) string {
	name, state := "?", "?"
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(st)
		if l, r := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')'); l >= 0 && r > l {
			name = s[l+1 : r]
			if f := strings.Fields(s[r+1:]); len(f) > 0 {
				state = f[0]
			}
		}
	}
	wchan := "?"
	if w, err := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid)); err == nil && len(w) > 0 {
		wchan = string(w)
	}
	return fmt.Sprintf("%s %s wchan=%s", name, state, wchan)
}
