package microvm

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/driver"
)

func TestZZTrace(t *testing.T) {
	if os.Getenv("DSEC_TRACE") == "" {
		t.Skip("DSEC_TRACE")
	}
	n, _ := strconv.Atoi(os.Getenv("DSEC_TRACE"))
	d, err := New(Config{StateDir: stateDir, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	d.cfg.Trace, _ = strconv.Atoi(os.Getenv("DSEC_CMDLINE"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	layers := imageLayers(t, "busybox")
	for i := 0; i < n; i++ {
		var f time.Duration
		if os.Getenv("DSEC_FLOOR") != "" {
			f, err = d.BootFloor(ctx, 512)
			if err != nil {
				t.Fatal(err)
			}
		}
		t0 := time.Now()
		inst, err := d.Start(ctx, driver.Spec{ID: fmt.Sprintf("tr%d", i), Layers: layers, CPU: 1, Memory: 512 << 20, Disk: 256 << 20})
		if err != nil {
			t.Fatal(err)
		}
		ts := time.Since(t0)
		pid := inst.(*instance).st.PID
		cpuBoot := cpuMS(pid)
		pr, err := inst.Exec(ctx, driver.ProcSpec{Args: []string{"/bin/true"}, Cwd: "/"}, driver.Stdio{})
		if err != nil {
			t.Fatal(err)
		}
		pr.Wait(ctx)
		pr.Close()
		te := time.Since(t0)
		cpuFirst := cpuMS(pid)
		th0 := threads(pid)
		var ex []time.Duration
		nexec := 60
		if os.Getenv("DSEC_PERF") != "" {
			os.WriteFile("/tmp/vmx/pid", []byte(strconv.Itoa(pid)), 0o644)
			time.Sleep(1500 * time.Millisecond)
			nexec = 300
		}
		for j := 0; j < nexec; j++ {
			t1 := time.Now()
			pr, _ := inst.Exec(ctx, driver.ProcSpec{Args: []string{"/bin/true"}, Cwd: "/"}, driver.Stdio{})
			pr.Wait(ctx)
			pr.Close()
			ex = append(ex, time.Since(t1))
		}
		cpuExecs := cpuMS(pid) - cpuFirst
		th1 := threads(pid)
		for k, v := range th1 {
			t.Logf("thread %s: %d ms", k, v-th0[k])
		}
		t.Logf("CPU boot %d firstexec %d perexec %.2f", cpuBoot, cpuFirst-cpuBoot, float64(cpuExecs)/float64(len(ex)))
		slices.Sort(ex)
		t.Logf("EXECP50 %v p90 %v", ex[len(ex)/2], ex[len(ex)*9/10])
		ex = nil
		b, _ := os.ReadFile(filepath.Join(inst.(*instance).st.Dir, "console.log"))
		t.Logf("floor %v start %v firstexec %v execs %v\n%s", f.Round(time.Millisecond), ts.Round(time.Millisecond), te.Round(time.Millisecond), ex, b)
		inst.Destroy(ctx)
	}
}

func cpuMS(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.Atoi(f[11])
	st, _ := strconv.Atoi(f[12])
	return (u + st) * 10
}

func threads(pid int) map[string]int {
	m := map[string]int{}
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, e := range ents {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, e.Name()))
		c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/comm", pid, e.Name()))
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		u, _ := strconv.Atoi(f[11])
		st, _ := strconv.Atoi(f[12])
		m[e.Name()+"/"+strings.TrimSpace(string(c))] = (u + st) * 10
	}
	return m
}
