package container_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/drivertest"
)

// TestOOMScoreAdjNotInherited: a node's oom_score_adj (a service manager may
// set one) does not pass to what runs in its sandboxes; with the kernel's
// default 0 the commands have 0 as well. (A negative value, the usual one for
// a protected service, needs CAP_SYS_RESOURCE to set, which a test in a
// container may lack; the init resets any value other than 0 the same way.)
func TestOOMScoreAdjNotInherited(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	lower := requireImage(t, "busybox")
	const adjPath = "/proc/self/oom_score_adj"
	orig, err := os.ReadFile(adjPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.WriteFile(adjPath, orig, 0) })
	for _, adj := range []string{"300", "0"} {
		t.Run(adj, func(t *testing.T) {
			// the driver's init spawner, and through it each init, inherit
			// the node's value at their start
			if err := os.WriteFile(adjPath, []byte(adj), 0); err != nil {
				t.Fatal(err)
			}
			d := newDriverFactory(testConfig(t))(t)
			if err := os.WriteFile(adjPath, orig, 0); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			inst, err := d.Start(ctx, driver.Spec{ID: drivertest.NewID("oa"), Layers: lower, Memory: 64 << 20, Disk: 16 << 20, PidsMax: 64})
			if err != nil {
				t.Fatal(err)
			}
			defer inst.Destroy(context.Background())
			for range 2 { // the first exec and one on a reused connection
				r, err := drivertest.Exec(ctx, inst, driver.ProcSpec{Args: []string{"cat", adjPath},
					Env: []string{"PATH=" + drivertest.DefaultPath}}, "")
				if err != nil {
					t.Fatal(err)
				}
				if r.Exit.Code != 0 || strings.TrimSpace(r.Stdout) != "0" {
					t.Errorf("node at %s: a command's oom_score_adj %q (exit %+v), want 0", adj, r.Stdout, r.Exit)
				}
			}
		})
	}
}
