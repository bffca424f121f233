package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/backend/container"
	"github.com/dsec-dev/dsec/internal/cgroups"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// fakeClock is the Manager's clock: real time plus an offset a test advances.
type fakeClock struct{ off atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *fakeClock) Advance(d time.Duration) { c.off.Add(int64(d)) }

// env is one node's worth of state: an agent data dir, a container driver
// configuration private to the test and the image store. Managers opened on it
// share all three, like an agent restarting on the same host.
type env struct {
	dataDir string
	dcfg    container.Config
	store   *image.Store
	clock   *fakeClock
}

func imagesDir() string {
	if d := os.Getenv("DSEC_IMAGES_DIR"); d != "" {
		return d
	}
	return "/var/lib/dsec/images"
}

// newEnv skips unless the test runs as root with the default image built. When
// the test ends (after every Manager's own cleanup) it checks that nothing was
// left behind: no records, logs, sandbox dirs, sockets or cgroups.
func newEnv(t testing.TB) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (namespaces, cgroups, mounts)")
	}
	store := &image.Store{Dir: imagesDir(), Default: "debian"}
	if _, err := store.Resolve(""); err != nil {
		t.Skipf("default image not available (run `make setup`): %v", err)
	}
	state, err := os.MkdirTemp("/var/lib", "dsec-at-")
	if err != nil {
		t.Fatal(err)
	}
	run, err := os.MkdirTemp("/run", "dsec-at-")
	if err != nil {
		os.RemoveAll(state)
		t.Fatal(err)
	}
	e := &env{
		dataDir: t.TempDir(),
		dcfg: container.Config{StateDir: state, RunDir: run,
			CgroupParent: "dsec-test-" + strings.TrimPrefix(filepath.Base(state), "dsec-at-")},
		store: store,
		clock: &fakeClock{},
	}
	t.Cleanup(func() {
		if ents, _ := os.ReadDir(filepath.Join(e.dataDir, "sandboxes")); len(ents) > 0 {
			for _, x := range ents {
				if !strings.HasSuffix(x.Name(), ".corrupt") {
					t.Errorf("record left behind: %s", x.Name())
				}
			}
		}
		if ents, _ := os.ReadDir(filepath.Join(e.dataDir, "logs")); len(ents) > 0 {
			t.Errorf("process logs left behind: %d dirs", len(ents))
		}
		if ents, _ := os.ReadDir(state); len(ents) > 0 {
			for _, x := range ents {
				if !strings.HasPrefix(x.Name(), "dsec-init-") {
					t.Errorf("left behind in the driver state dir: %s", x.Name())
				}
			}
		}
		if ents, _ := os.ReadDir(run); len(ents) > 0 {
			for _, x := range ents {
				if strings.HasSuffix(x.Name(), ".sock") {
					t.Errorf("control socket left behind: %s", x.Name())
				}
			}
		}
		if h, err := cgroups.Detect("/sys/fs/cgroup"); err == nil {
			if names, _ := h.List(e.dcfg.CgroupParent); len(names) > 0 {
				t.Errorf("cgroups left behind: %v", names)
			}
			if g, err := h.Open(e.dcfg.CgroupParent); err == nil {
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
	return e
}

// open starts a Manager (with its own driver instance) on the env. When the test
// ends it deletes every sandbox the Manager still has, then closes it.
func (e *env) open(t testing.TB, mod func(*agent.Config)) *agent.Manager {
	t.Helper()
	drv, err := container.New(e.dcfg)
	if err != nil {
		t.Fatalf("container.New: %v", err)
	}
	cfg := agent.Config{DataDir: e.dataDir, Driver: drv, Images: e.store, Node: "test", Now: e.clock.Now}
	if mod != nil {
		mod(&cfg)
	}
	m, err := agent.New(ctxT(t), cfg)
	if err != nil {
		drv.Close()
		t.Fatalf("agent.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := m.DeleteAll(ctx); err != nil {
			t.Errorf("DeleteAll: %v", err)
		}
		m.Close()
		drv.Close()
	})
	return m
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func create(t *testing.T, m *agent.Manager, req api.CreateSandboxRequest) api.Sandbox {
	t.Helper()
	sb, err := m.Create(ctxT(t), req)
	if err != nil {
		t.Fatalf("Create(%+v): %v", req, err)
	}
	if sb.State != api.StateRunning {
		t.Fatalf("new sandbox state %q", sb.State)
	}
	return sb
}

func execOK(t *testing.T, m *agent.Manager, id string, req api.ExecRequest) api.ExecResult {
	t.Helper()
	res, err := m.Exec(ctxT(t), id, req)
	if err != nil {
		t.Fatalf("Exec(%v%s): %v", req.Cmd, req.Shell, err)
	}
	return res
}

// shOK runs a shell command and requires exit 0.
func shOK(t *testing.T, m *agent.Manager, id, script string) string {
	t.Helper()
	res := execOK(t, m, id, api.ExecRequest{Shell: script})
	if res.ExitCode != 0 {
		t.Fatalf("sh -c %q: exit %d signal %q stderr %q", script, res.ExitCode, res.Signal, res.Stderr)
	}
	return res.Stdout
}

func wantCode(t *testing.T, what string, err error, code api.Code) {
	t.Helper()
	if !errdefs.Is(err, code) {
		t.Errorf("%s: error %v (code %s), want %s", what, err, errdefs.CodeOf(err), code)
	}
}

// recordOf reads the agent's record of a sandbox from disk.
func (e *env) recordOf(t *testing.T, id string) map[string]json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dataDir, "sandboxes", id+".json"))
	if err != nil {
		t.Fatalf("read record: %v", err)
	}
	var r map[string]json.RawMessage
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("parse record: %v", err)
	}
	return r
}

// initPID returns the host pid of a sandbox's init from its record.
func (e *env) initPID(t *testing.T, id string) int {
	t.Helper()
	var st struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal(e.recordOf(t, id)["driver_state"], &st); err != nil || st.PID <= 0 {
		t.Fatalf("driver_state of %s: %v (pid %d)", id, err, st.PID)
	}
	return st.PID
}

func (e *env) recordExists(id string) bool {
	_, err := os.Stat(filepath.Join(e.dataDir, "sandboxes", id+".json"))
	return !errors.Is(err, os.ErrNotExist)
}

// sandboxDirs lists the per-sandbox directories the driver keeps: ID.d in
// its run dir (mountpoints, init log), and any in its state dir (which a
// sandbox no longer gets: one there is a leftover too).
func (e *env) sandboxDirs() []string {
	var out []string
	for _, dir := range []string{e.dcfg.RunDir, e.dcfg.StateDir} {
		ents, _ := os.ReadDir(dir)
		for _, x := range ents {
			if x.IsDir() && (dir == e.dcfg.StateDir || strings.HasSuffix(x.Name(), ".d")) {
				out = append(out, x.Name())
			}
		}
	}
	return out
}

// cgroupsOf lists the sandbox cgroups under the driver's parent.
func (e *env) cgroupsOf(t *testing.T) []string {
	t.Helper()
	h, err := cgroups.Detect("/sys/fs/cgroup")
	if err != nil {
		t.Fatalf("cgroups: %v", err)
	}
	names, err := h.List(e.dcfg.CgroupParent)
	if err != nil {
		t.Fatalf("list cgroups: %v", err)
	}
	return names
}

// requireEmpty checks that the node holds no sandbox at all: none listed, no
// record, no sandbox dir, no cgroup. A deleted sandbox is out of the list and
// the records at once; its dirs and cgroups go with its teardown, in the
// background, so those are waited for (10 s).
func (e *env) requireEmpty(t *testing.T, m *agent.Manager, what string) {
	t.Helper()
	if list, _ := m.List(ctxT(t)); len(list) != 0 {
		t.Errorf("%s: %d sandboxes listed", what, len(list))
	}
	if ents, _ := os.ReadDir(filepath.Join(e.dataDir, "sandboxes")); len(ents) != 0 {
		var names []string
		for _, x := range ents {
			if !strings.HasSuffix(x.Name(), ".corrupt") {
				names = append(names, x.Name())
			}
		}
		if len(names) > 0 {
			t.Errorf("%s: records left: %v", what, names)
		}
	}
	testwait.Until(10*time.Second, func() bool { return len(e.sandboxDirs())+len(e.cgroupsOf(t)) == 0 })
	if dirs := e.sandboxDirs(); len(dirs) != 0 {
		t.Errorf("%s: sandbox dirs left: %v", what, dirs)
	}
	if cgs := e.cgroupsOf(t); len(cgs) != 0 {
		t.Errorf("%s: cgroups left: %v", what, cgs)
	}
}

// waitFor polls cond every 20ms until it holds or within passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !testwait.Until(within, cond) {
		t.Fatalf("timed out after %v waiting for %s", within, what)
	}
}

// validated is m under the request validation, as every role composes its
// session service (session.Validating): the agent itself checks only what
// depends on the node and the sandbox.
func validated(m *agent.Manager) session.Service {
	return session.Chain(m, session.Validating(nil))
}
