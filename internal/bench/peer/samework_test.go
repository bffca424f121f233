package peer

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestSessionSameWork: a peer container made by a Session runs on an overlay
// root with a writable layer, in a cgroup with the Work's limits and under a
// seccomp filter (dsec's profile, translated: TestSeccompNames); after Close
// nothing of it is left (containers, cgroups, mounts, files).
func TestSessionSameWork(t *testing.T) {
	for _, name := range Known {
		t.Run(name, func(t *testing.T) {
			r := findOrSkip(t, name)
			rootfs := busyboxRootfs(t, "sleep", "sh", "unshare", "cat")
			w := Work{Rootfs: rootfs, MemoryBytes: 96 << 20, DiskBytes: 8 << 20, CPU: 0.5, PidsMax: 77}
			s, err := r.Open(w, 2)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for i := range 3 {
				if err := s.Create(ctx, i); err != nil {
					s.Close()
					t.Fatalf("create %d: %v", i, err)
				}
			}
			// runc/crun state gives the init's pid.
			var st struct{ Pid int }
			out, err := exec.Command(r.Path, append(append([]string{"--root", s.b.state}, s.b.r.ExtraArgs...), "state", s.id(1))...).Output()
			if err == nil {
				err = json.Unmarshal(out, &st)
			}
			if err != nil || st.Pid <= 0 {
				s.Close()
				t.Fatalf("state: %v %s", err, out)
			}
			status, _ := os.ReadFile("/proc/" + strconv.Itoa(st.Pid) + "/status")
			if !strings.Contains(string(status), "Seccomp:\t2") {
				t.Errorf("peer init has no seccomp filter:\n%s", status)
			}
			cg, _ := os.ReadFile("/proc/" + strconv.Itoa(st.Pid) + "/cgroup")
			var memPath string
			for _, l := range strings.Split(string(cg), "\n") {
				if f := strings.SplitN(l, ":", 3); len(f) == 3 && f[1] == "memory" {
					memPath = f[2]
				}
			}
			if b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", memPath, "memory.limit_in_bytes")); err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(96<<20) {
				t.Errorf("memory limit of the peer's cgroup %q: %q %v", memPath, b, err)
			}
			if b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/pids", memPath, "pids.max")); err != nil || strings.TrimSpace(string(b)) != "77" {
				t.Errorf("pids limit: %q %v", b, err)
			}
			root, _ := os.Readlink("/proc/" + strconv.Itoa(st.Pid) + "/root")
			mi, _ := os.ReadFile("/proc/" + strconv.Itoa(st.Pid) + "/mountinfo")
			if !strings.Contains(string(mi), " / rw") || !strings.Contains(string(mi), "overlay") {
				t.Errorf("peer root (%s) is not a writable overlay:\n%s", root, mi)
			}
			if err := s.Delete(ctx, 0); err != nil {
				t.Errorf("delete: %v", err)
			}
			dir := s.dir
			if err := s.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
			if left, _ := filepath.Glob("/sys/fs/cgroup/*/" + s.prefix); len(left) > 0 {
				t.Errorf("cgroups left: %v", left)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("session dir left: %v", err)
			}
			if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), dir) {
				t.Errorf("mounts left under %s", dir)
			}
		})
	}
}
