package agent_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/pkg/api"
)

// procIDs is sandbox id's processes by ID.
func procIDs(t *testing.T, m *agent.Manager, id string) map[string]api.Process {
	t.Helper()
	ps, err := m.ListProcesses(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]api.Process{}
	for _, p := range ps {
		out[p.ID] = p
	}
	return out
}

// TestMockProcessesKeptAcrossRestarts: background processes started after the
// sandbox's record was last written (they go to the process journal, not into
// a rewrite of the record) are all known to a restarted agent, labels and
// exit status included, a line cut short by a crash notwithstanding; a new
// process after the restart gets a new ID; and processes a reset dropped stay
// dropped across a later restart.
func TestMockProcessesKeptAcrossRestarts(t *testing.T) {
	e := newMockEnv(t)
	m := e.open(t)
	sb := create(t, m, api.CreateSandboxRequest{})
	long, err := m.StartProcess(ctxT(t), sb.ID, api.ExecRequest{Shell: "sleep 30", Labels: map[string]string{"tag": "long"}})
	if err != nil {
		t.Fatal(err)
	}
	short, err := m.StartProcess(ctxT(t), sb.ID, api.ExecRequest{Shell: "echo out; exit 3"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := m.WaitProcess(ctxT(t), sb.ID, short.ID); err != nil || got.Result == nil || got.Result.ExitCode != 3 {
		t.Fatalf("wait: %+v, %v", got, err)
	}
	m.Close()
	// An agent killed in the middle of an append leaves a partial line.
	j, err := os.OpenFile(filepath.Join(e.dataDir, "logs", sb.ID, "procs.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatalf("the process journal: %v", err)
	}
	if _, err := j.WriteString(`{"id":"p9","pid":`); err != nil {
		t.Fatal(err)
	}
	j.Close()

	m2 := e.open(t)
	ps := procIDs(t, m2, sb.ID)
	if p, ok := ps[long.ID]; !ok || !p.Running || p.Labels["tag"] != "long" {
		t.Errorf("the running process after a restart: %+v (listed: %v)", p, ok)
	}
	if got, err := m2.WaitProcess(ctxT(t), sb.ID, short.ID); err != nil || got.Result == nil || got.Result.ExitCode != 3 {
		t.Errorf("the ended process after a restart: %+v, %v", got, err)
	}
	if len(ps) != 2 {
		t.Errorf("processes after a restart: %v, want %s and %s", ps, long.ID, short.ID)
	}
	r, err := m2.ProcessLogs(ctxT(t), sb.ID, short.ID, "stdout", 0)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	third, err := m2.StartProcess(ctxT(t), sb.ID, api.ExecRequest{Shell: "true"})
	if err != nil {
		t.Fatal(err)
	}
	if third.ID == long.ID || third.ID == short.ID {
		t.Errorf("a process after the restart got ID %s again", third.ID)
	}
	if _, err := m2.SetDeadline(ctxT(t), sb.ID, api.DeadlineRequest{TimeoutSeconds: 3600}); err != nil {
		t.Fatal(err)
	}
	m2.Close()

	m3 := e.open(t)
	ps = procIDs(t, m3, sb.ID)
	ids := make([]string, 0, len(ps))
	for id := range ps {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	if want := []string{long.ID, short.ID, third.ID}; !slices.Equal(ids, sortedCopy(want)) {
		t.Errorf("processes after a second restart: %v, want %v", ids, want)
	}
	if _, err := m3.Reset(ctxT(t), sb.ID); err != nil {
		t.Fatal(err)
	}
	m3.Close()

	m4 := e.open(t)
	if ps := procIDs(t, m4, sb.ID); len(ps) != 0 {
		t.Errorf("processes a reset dropped are back after a restart: %v", ps)
	}
	next, err := m4.StartProcess(ctxT(t), sb.ID, api.ExecRequest{Shell: "true"})
	if err != nil {
		t.Fatal(err)
	}
	if next.ID == long.ID || next.ID == short.ID || next.ID == third.ID {
		t.Errorf("a process after reset and restart reused ID %s", next.ID)
	}
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// TestLogRootSpreadsSandboxes: on a file system with inode flags (ext4), the
// directory of the sandboxes' process logs is marked the top of directory
// hierarchies (chattr +T), so that the file system spreads the sandboxes' log
// directories rather than filling one block group with every process log.
func TestLogRootSpreadsSandboxes(t *testing.T) {
	e := newMockEnv(t)
	e.open(t)
	f, err := os.Open(filepath.Join(e.dataDir, "logs"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		t.Logf("no inode flags on this file system (%v): nothing to check", err)
		return
	}
	if flags&0x00020000 == 0 { // FS_TOPDIR_FL
		t.Errorf("logs directory flags %#x: FS_TOPDIR_FL (chattr +T) not set", flags)
	}
}
