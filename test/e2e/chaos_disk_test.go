package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/trajectory"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// loopFS makes a small ext4 file system on a sparse file, mounts it and returns
// the mount point; unmounting and detaching the loop device are registered
// with t.Cleanup (they run after the cleanups registered later, e.g. the
// server's).
func loopFS(t *testing.T, size int64) string {
	t.Helper()
	work, err := os.MkdirTemp("/var/lib", "dsec-e2e-loop-")
	if err != nil {
		t.Fatal(err)
	}
	img, mnt := filepath.Join(work, "fs.img"), filepath.Join(work, "mnt")
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	f, err := os.Create(img)
	if err == nil {
		err = f.Truncate(size)
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	// -m 0: no blocks reserved for root (the server runs as root).
	run("mkfs.ext4", "-q", "-F", "-m", "0", img)
	dev := run("losetup", "--find", "--show", img)
	t.Cleanup(func() {
		for i := 0; ; i++ {
			err := syscall.Unmount(mnt, 0)
			if err == nil || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOENT) {
				break
			}
			if i == 50 {
				t.Errorf("unmount %s: %v", mnt, err)
				_ = syscall.Unmount(mnt, syscall.MNT_DETACH)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v %s", dev, err, out)
		}
		os.RemoveAll(work)
	})
	run("mount", "-t", "ext4", dev, mnt)
	return mnt
}

// fill writes path until the file system is full.
func fill(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n int64
	for _, chunk := range []int{1 << 20, 4 << 10, 512} {
		buf := make([]byte, chunk)
		for {
			k, err := f.Write(buf)
			n += int64(k)
			if err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				break
			}
		}
	}
	_ = f.Sync()
	return n
}

// wantInfraOrExhausted checks err is what a full data disk may answer: a
// resource_exhausted, or an internal error marked as infrastructure.
func wantInfraOrExhausted(t *testing.T, what string, err error) {
	t.Helper()
	ae, ok := api.AsError(err)
	switch {
	case err == nil:
		t.Errorf("%s on a full data disk succeeded", what)
	case !ok:
		t.Errorf("%s: %v: not an API error", what, err)
	case ae.Code == api.CodeResourceExhausted, ae.Code == api.CodeInternal && ae.Infrastructure:
	default:
		t.Errorf("%s: %v (code %s, infrastructure %v): want resource_exhausted or an infrastructure error", what, err, ae.Code, ae.Infrastructure)
	}
}

// TestChaosDiskFull runs the server on a 64 MiB loop file system as its data
// dir and fills it while sandboxes are created and trajectory steps logged:
// creates fail with a clear error and leave nothing half-created, the
// trajectory log stays consistent, and everything works again once space is
// freed.
func TestChaosDiskFull(t *testing.T) {
	if skipAll != "" {
		t.Skip(skipAll)
	}
	mnt := loopFS(t, 64<<20)
	n, base := startChaosNode(t, filepath.Join(mnt, "data"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	id := n.create(t, api.CreateSandboxRequest{})
	const traj = "disk-full"
	// Each step's answer is 4 KiB, so the log outgrows what its files
	// preallocated while the disk is full.
	out := func(k int) string { return fmt.Sprintf("step %d %s\n", k, strings.Repeat("x", 4096)) }
	step := func(k int) (api.ExecResult, error) {
		return n.cl.Exec(client.WithTrajectory(ctx, traj, k), id, api.ExecRequest{Shell: fmt.Sprintf("echo %d >> /root/steps; printf 'step %d %%s\\n' $(printf %%4096s | tr ' ' x)", k, k)})
	}
	for k := 1; k <= 5; k++ {
		if r, err := step(k); err != nil || r.Stdout != out(k) {
			t.Fatalf("step %d before the disk filled: %+v %v", k, r, err)
		}
	}
	before, err := n.cl.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mid := ownedState(t, n.dataDir, n.cmd.Process.Pid)
	// What a sandbox keeps in the data dir: its record and its state dir.
	entries := func() (k int) {
		for _, d := range []string{"sandboxes", "containers"} {
			es, _ := os.ReadDir(filepath.Join(n.dataDir, d))
			for _, e := range es {
				if strings.HasPrefix(e.Name(), "sb-") {
					k++
				}
			}
		}
		return k
	}
	before0 := entries()

	filler := filepath.Join(mnt, "filler")
	t.Logf("filled the data disk with %d MiB", fill(t, filler)>>20)
	// Creates: each fails clearly; nothing of them stays.
	for i := range 5 {
		_, err := client.New("http://"+n.addr, n.token, client.WithRetry(0)).Create(ctx, api.CreateSandboxRequest{RequestID: fmt.Sprintf("full-%d", i)})
		wantInfraOrExhausted(t, "create", err)
		if i == 0 {
			t.Logf("create on the full disk: %v", err)
		}
		fill(t, filler) // whatever a failed create freed
	}
	// Almost full: a create may get part-way (its state dir, its record) before
	// the disk runs out. Each one succeeds or fails clearly; the failed ones
	// leave nothing (checked once the successful ones are deleted).
	var made []string
	for _, room := range []int64{1 << 10, 2 << 10, 3 << 10, 4 << 10, 6 << 10, 8 << 10} {
		st, err := os.Stat(filler)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(filler, st.Size()-room); err != nil {
			t.Fatal(err)
		}
		sb, err := client.New("http://"+n.addr, n.token, client.WithRetry(0)).Create(ctx, api.CreateSandboxRequest{})
		if err == nil {
			made = append(made, sb.ID)
		} else {
			wantInfraOrExhausted(t, fmt.Sprintf("create with %d KiB free", room>>10), err)
			t.Logf("create with %d KiB free: %v", room>>10, err)
		}
		fill(t, filler)
	}
	t.Logf("creates with 1-8 KiB free: %d of 6 succeeded", len(made))
	for _, id := range made {
		if err := n.cl.Delete(ctx, id); err != nil {
			t.Errorf("delete %s: %v", id, err)
		}
	}
	// Trajectory steps: answered (and then logged) or refused; never half-logged.
	// The disk is full but for 1 MiB over the log's reserve, so the log's own
	// writes take it over the edge.
	st, err := os.Stat(filler)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filler, st.Size()-(trajectory.DefaultDiskReserve+1<<20)); err != nil {
		t.Fatal(err)
	}
	fullAnswered := map[int]api.ExecResult{}
	last := 0 // the last step issued on the full disk
	for k := 6; k <= 400; k++ {
		last = k
		r, err := step(k)
		if err == nil {
			fullAnswered[k] = r
			continue
		}
		wantInfraOrExhausted(t, fmt.Sprintf("trajectory step %d", k), err)
		t.Logf("trajectory step %d on the full disk: %v", k, err)
		break // the next steps wait for this one to be re-issued
	}
	t.Logf("%d trajectory steps answered on the full disk", len(fullAnswered))
	after, err := n.cl.List(ctx)
	if err != nil || len(after) != len(before) {
		t.Errorf("sandboxes on a full disk: %d before, %d after (%v)", len(before), len(after), err)
	}
	if k := entries(); k != before0 {
		t.Errorf("failed creates left records or state dirs: %d sandbox entries in the data dir, %d before", k, before0)
	}
	if now := ownedState(t, n.dataDir, n.cmd.Process.Pid); !now.equal(mid) {
		t.Errorf("failed creates left something on the host:\n before: %s\n after:  %s", mid, now)
	}
	if r, err := n.cl.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}}); err != nil || r.ExitCode != 0 {
		t.Errorf("untagged exec in a sandbox on a full data disk: %+v %v", r, err)
	}

	// Space comes back: everything works again and the log is consistent.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// What was answered must be durable: a kill -9 and restart replays it.
	n.stop(false)
	n.start()
	for k := 1; k <= last+2; k++ {
		r, err := step(k)
		switch {
		case k <= 5 || fullAnswered[k].Stdout != "":
			if err != nil || !r.Replayed || r.Stdout != out(k) {
				t.Errorf("step %d answered before is not replayed after space returned: %+v %v", k, r, err)
			}
		case err != nil && apiCode(err) == api.CodeOutcomeUnknown:
			// Begun but not finished while the disk was full: the log says so.
			t.Logf("step %d: outcome unknown (begun on the full disk)", k)
		case err != nil || r.Stdout != out(k):
			t.Errorf("step %d after space returned: %+v %v", k, r, err)
		}
	}
	tr, err := n.cl.GetTrajectory(ctx, traj)
	if err != nil {
		t.Fatal(err)
	}
	if tr.LastStep != last+2 || tr.StepCount != last+2 {
		t.Errorf("trajectory after space returned: last step %d, %d steps; want %d and %d", tr.LastStep, tr.StepCount, last+2, last+2)
	}
	for i, s := range tr.Steps {
		if s.Step != i+1 {
			t.Errorf("logged step %d at position %d", s.Step, i)
		}
	}
	if _, err := n.cl.Create(ctx, api.CreateSandboxRequest{RequestID: "full-0"}); err != nil {
		t.Errorf("create after space returned: %v", err)
	}
	n.deleteAllParallel(t, ctx)
	n.stop(true)
	requireBaseline(t, n.dataDir, 0, base)
}
