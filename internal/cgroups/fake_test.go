package cgroups

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fakeV1Files() and fakeV2Files() are the control files the fake kernel puts in
// every new cgroup directory.
func fakeV1Files() map[string]string {
	return map[string]string{
		"cgroup.procs": "", "tasks": "",
		"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "-1",
		"cpuacct.usage":         "0",
		"memory.limit_in_bytes": "9223372036854771712", "memory.memsw.limit_in_bytes": "9223372036854771712",
		"memory.oom_control":    "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
		"memory.usage_in_bytes": "0", "memory.max_usage_in_bytes": "0",
		"pids.max":      "max",
		"freezer.state": "THAWED",
	}
}

func fakeV2Files() map[string]string {
	return map[string]string{
		"cgroup.procs": "", "cgroup.controllers": "cpu memory pids", "cgroup.subtree_control": "",
		"cgroup.freeze": "0", "cgroup.events": "populated 0\nfrozen 0\n", "cgroup.kill": "",
		"cpu.max": "max 100000", "cpu.stat": "usage_usec 0\nuser_usec 0\nsystem_usec 0\n",
		"memory.max": "max", "memory.swap.max": "max", "memory.current": "0",
		"memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n",
		"pids.max":      "max",
	}
}

func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// fakeKernel makes h's mkdir populate new directories with files (minus
// omit) and its rmdir drop them again, like cgroupfs does.
func fakeKernel(t testing.TB, h *Hierarchy, files map[string]string, omit ...string) {
	h.mkdir = func(path string) error {
		if err := mkdirCgroup(path); err != nil {
			return err
		}
		for name, content := range files {
			if !contains(omit, name) {
				if err := os.WriteFile(filepath.Join(path, name), []byte(content), 0o644); err != nil {
					return err
				}
			}
		}
		return nil
	}
	h.rmdir = func(path string) error {
		entries, err := os.ReadDir(path)
		if err != nil {
			return unix.ENOENT
		}
		for _, e := range entries {
			if e.IsDir() {
				return unix.EBUSY
			}
		}
		return os.RemoveAll(path)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// fakeV1Root lays out a v1 mount tree; combined co-mounts cpu and cpuacct
// as "cpu,cpuacct" with symlinks, like systemd does.
func fakeV1Root(t testing.TB, combined bool) string {
	root := t.TempDir()
	mounts := []string{"memory", "pids", "freezer", "devices"}
	if combined {
		mounts = append(mounts, "cpu,cpuacct")
	} else {
		mounts = append(mounts, "cpu", "cpuacct")
	}
	for _, m := range mounts {
		if err := os.Mkdir(filepath.Join(root, m), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFiles(t, filepath.Join(root, m), map[string]string{"cgroup.procs": "1\n"})
	}
	if combined {
		for _, l := range []string{"cpu", "cpuacct"} {
			if err := os.Symlink("cpu,cpuacct", filepath.Join(root, l)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// An unmounted placeholder directory must be ignored.
	if err := os.Mkdir(filepath.Join(root, "net_cls"), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

func fakeV2Root(t testing.TB) string {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"cgroup.controllers": "cpuset cpu io memory hugetlb pids", "cgroup.subtree_control": "", "cgroup.procs": "1\n",
	})
	return root
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func assertFile(t testing.TB, path, want string) {
	t.Helper()
	if got := readFile(t, path); got != want {
		t.Errorf("%s = %q, want %q", path, got, want)
	}
}

func assertGone(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still exists (stat err %v)", path, err)
	}
}
