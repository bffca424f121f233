package container_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/container"
	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/drivertest"
	"github.com/dsec-dev/dsec/internal/cgroups"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/hostfeat"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/pkg/api"
)

// imagesDir is where `make setup` builds the default images.
func imagesDir() string {
	if d := os.Getenv("DSEC_IMAGES_DIR"); d != "" {
		return d
	}
	return "/var/lib/dsec/images"
}

// requireImage skips unless the test runs as root and the image is built, and
// returns its layers.
func requireImage(t testing.TB, name string) []driver.Layer {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (namespaces, cgroups, mounts)")
	}
	img, err := (&image.Store{Dir: imagesDir()}).Resolve(name)
	if err != nil {
		t.Skipf("image %s not available (run `make setup`): %v", name, err)
	}
	return driver.DirLayers(img.Lower())
}

// testConfig returns a driver configuration private to this test: a short state
// dir under /var/lib, a run dir under /run and its own cgroup parent. When the test
// ends it checks that no sandbox left anything behind, then removes them all.
func testConfig(t testing.TB) container.Config {
	t.Helper()
	state, err := os.MkdirTemp("/var/lib", "dsec-ct-")
	if err != nil {
		t.Fatal(err)
	}
	run, err := os.MkdirTemp("/run", "dsec-ct-")
	if err != nil {
		os.RemoveAll(state)
		t.Fatal(err)
	}
	cfg := container.Config{StateDir: state, RunDir: run, CgroupParent: "dsec-test-" + filepath.Base(state)[len("dsec-ct-"):]}
	t.Cleanup(func() {
		ents, _ := os.ReadDir(state)
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), "dsec-init-") {
				t.Errorf("left behind in the state dir: %s", e.Name())
			}
		}
		if ents, _ := os.ReadDir(run); len(ents) > 0 {
			t.Errorf("left behind in the run dir: %d entries, first %s", len(ents), ents[0].Name())
		}
		if h, err := cgroups.Detect("/sys/fs/cgroup"); err == nil {
			if names, _ := h.List(cfg.CgroupParent); len(names) > 0 {
				t.Errorf("cgroups left behind: %v", names)
			}
			if g, err := h.Open(cfg.CgroupParent); err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if err := g.Delete(ctx); err != nil {
					t.Errorf("remove test cgroup parent: %v", err)
				}
				cancel()
			}
		}
		os.RemoveAll(state)
		os.RemoveAll(run)
	})
	return cfg
}

// newDriverFactory returns driver instances that share cfg, each closed when the
// test that asked for it ends.
func newDriverFactory(cfg container.Config) func(t *testing.T) driver.Driver {
	return func(t *testing.T) driver.Driver {
		t.Helper()
		d, err := container.New(cfg)
		if err != nil {
			t.Fatalf("container.New: %v", err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
}

func TestConformance(t *testing.T) {
	for _, userns := range []bool{false, true} {
		for _, image := range []string{"debian", "busybox"} {
			name := image
			if userns {
				name += "/userns"
			}
			t.Run(name, func(t *testing.T) {
				lower := requireImage(t, image)
				cfg := testConfig(t)
				cfg.UserNS = userns
				var opts []drivertest.Option
				if userns {
					// The writable layer of a user-namespace sandbox is a tmpfs
					// holding overlayfs's user.* xattrs: before Linux 6.6 a
					// removed image directory fails with EIO (docs/host-requirements.md).
					opts = append(opts, drivertest.NeedFeatures("Snapshot", hostfeat.TmpfsUserXattr))
				}
				drivertest.Run(t, newDriverFactory(cfg), lower, opts...)
			})
		}
	}
}

// TestRecoverAfterInitKilled is the container-specific half of recovery: when
// the init dies while no agent watches (killed from outside), Recover reports
// not_found and Cleanup releases the cgroup and directories.
func TestRecoverAfterInitKilled(t *testing.T) {
	cfg := testConfig(t)
	newDriver := newDriverFactory(cfg)
	d := newDriver(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	inst, spec, pid := startBusybox(ctx, t, d, "ck")
	defer inst.Destroy(context.Background())
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-inst.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done() not closed after the init was killed")
	}
	d2 := newDriver(t)
	if _, err := d2.Recover(ctx, spec, inst.State()); !errdefs.Is(err, api.CodeNotFound) {
		t.Fatalf("Recover of a sandbox whose init died = %v, want not_found", err)
	}
	if err := d2.Cleanup(ctx, spec, inst.State()); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.StateDir, spec.ID)); !os.IsNotExist(err) {
		t.Errorf("sandbox dir still there after Cleanup: %v", err)
	}
}

// BenchmarkPTY measures a keystroke's round trip through a container terminal
// (stdin stream → master → cat on a raw terminal in the sandbox → master →
// stdout stream).
func BenchmarkPTY(b *testing.B) {
	layers := requireImage(b, "busybox")
	cfg := testConfig(b)
	d, err := container.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	drivertest.BenchPTY(b, d, layers)
}

// TestInitFromTemplate: on either cgroup version a sandbox's init is cloned
// by a spawner helper from its template namespace (on cgroup v2 straight into
// its cgroup): its overlay is on the layers handed over as fds, no host path
// is in its mount table, and it is in its own cgroup.
func TestInitFromTemplate(t *testing.T) {
	d := newDriverFactory(testConfig(t))(t)
	v := d.(interface{ CgroupVersion() int }).CgroupVersion()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	inst, spec, pid := startBusybox(ctx, t, d, "tp")
	defer inst.Destroy(context.Background())
	lower := spec.Layers
	var out bytes.Buffer
	p, err := inst.Exec(ctx, driver.ProcSpec{Args: []string{"cat", "/proc/self/mountinfo"}, Env: []string{"PATH=/bin:/usr/bin"}},
		driver.Stdio{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if ex, err := p.Wait(ctx); err != nil || ex.Code != 0 {
		t.Fatalf("cat /proc/self/mountinfo: %+v, %v", ex, err)
	}
	mounts := out.String()
	if !strings.Contains(mounts, "lowerdir=/rw/.lower/0") || strings.Contains(mounts, lower[0].Path) {
		t.Fatalf("cgroup v%d: the init was not cloned from the spawner's template (lower %s):\n%s", v, lower[0].Path, mounts)
	}
	b, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(pid), "cgroup"))
	if err != nil || !strings.Contains(string(b), spec.ID) {
		t.Fatalf("cgroup v%d: the init's cgroups %q (%v) do not name the sandbox", v, b, err)
	}
}

// startBusybox starts a small busybox sandbox on d (ID prefix prefix) and
// returns it, its spec and its init's pid.
func startBusybox(ctx context.Context, t *testing.T, d driver.Driver, prefix string) (driver.Instance, driver.Spec, int) {
	t.Helper()
	spec := driver.Spec{ID: drivertest.NewID(prefix), Layers: requireImage(t, "busybox"), Memory: 64 << 20, Disk: 16 << 20, PidsMax: 64}
	inst, err := d.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal(inst.State(), &st); err != nil || st.PID <= 0 {
		inst.Destroy(context.Background())
		t.Fatalf("state %s: %v", inst.State(), err)
	}
	return inst, spec, st.PID
}
