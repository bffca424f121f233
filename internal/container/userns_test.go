package container

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/driver"
)

// startNS creates a sandbox with or without a user namespace (defences
// otherwise default), destroyed at cleanup.
func (w *weakDriver) startNS(t *testing.T, userns bool) driver.Instance {
	t.Helper()
	w.mu.Lock()
	w.n++
	id := fmt.Sprintf("uns%d", w.n)
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	inst, err := w.Start(ctx, driver.Spec{ID: id, Lower: w.lower, Memory: 1 << 30, Disk: 64 << 20,
		PidsMax: 512, UserNS: &userns})
	if err != nil {
		t.Fatalf("start sandbox (userns %v): %v", userns, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := inst.Destroy(ctx); err != nil {
			t.Errorf("destroy: %v", err)
		}
	})
	return inst
}

func sh(t *testing.T, inst driver.Instance, script string) string {
	t.Helper()
	out, errOut, ex := run(t, inst, "sh", "-c", script)
	if ex.Code != 0 {
		t.Fatalf("%s: exit %+v: %s%s", script, ex, out, errOut)
	}
	return strings.TrimSpace(out)
}

func TestUserNSMapping(t *testing.T) {
	w := newWeakDriver(t)
	inst := w.startNS(t, true)
	st := inst.(*instance).st
	if st.IDBase == 0 || st.IDSize != 65536 {
		t.Fatalf("driver state has no id range: %+v", st)
	}
	if got, want := strings.Join(strings.Fields(sh(t, inst, "cat /proc/self/uid_map")), " "),
		fmt.Sprintf("0 %d 65536", st.IDBase); got != want {
		t.Errorf("uid_map %q, want %q", got, want)
	}
	if got := sh(t, inst, "stat -c %u:%g /etc/passwd /usr/bin/ls"); got != "0:0\n0:0" {
		t.Errorf("image files owned by %q, want 0:0", got)
	}
	// the init as seen from the host runs as the mapped uid
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", st.PID))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), fmt.Sprintf("Uid:\t%d\t", st.IDBase)) {
		t.Errorf("init's host uid is not %d:\n%s", st.IDBase, b)
	}
	t.Log(sh(t, inst, "id; ls -ln /dev; touch /tmp/x; stat -c %u /tmp/x; cat /proc/self/status | grep Cap"))
}
