package initproto

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// BenchmarkSpawn measures sandbox creation: spawn, first ping, kill, reap;
// with the shared sysfs (as the container driver does) and with a sysfs of
// the init's own.
func BenchmarkSpawn(b *testing.B) {
	requireRoot(b)
	for _, shared := range []bool{true, false} {
		b.Run(map[bool]string{true: "shared-sysfs", false: "own-sysfs"}[shared], func(b *testing.B) {
			initPath, lower, sockDir, base := installInit(b), makeLower(b), shortDir(b), b.TempDir()
			sysfs := ""
			if shared {
				sysfs = sharedSysfs(b)
			}
			ctx := context.Background()
			b.ResetTimer()
			for i := range b.N {
				cfg := sandboxConfig(b, initPath, lower, filepath.Join(base, fmt.Sprint(i)), sockDir)
				cfg.SysfsPath = sysfs
				in, err := Spawn(ctx, cfg)
				if err != nil {
					b.Fatal(err)
				}
				c, err := Dial(ctx, cfg.SocketPath)
				if err == nil {
					err = c.Ping(ctx)
					c.Close()
				}
				killAndReap(in.PID)
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSpawnSecurity compares the default policy with the policies of
// the previous release (OCI masks only, no nodev, no xino, no ping range)
// and with no masks, to show what each costs at create.
func BenchmarkSpawnSecurity(b *testing.B) {
	requireRoot(b)
	oci := DefaultSecurity()
	oci.Masked = []string{"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
		"/sys/devices/virtual/powercap"}
	oci.NoXino, oci.PingGroupRange, oci.RootNoDev = true, "", false
	none := DefaultSecurity()
	none.Masked, none.ReadOnly = nil, nil
	initPath, lower, sockDir, base := installInit(b), makeLower(b), shortDir(b), b.TempDir()
	sysfs := sharedSysfs(b)
	for _, c := range []struct {
		name string
		sec  Security
	}{{"default", DefaultSecurity()}, {"previous", oci}, {"no-masks", none}} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			for i := range b.N {
				cfg := sandboxConfig(b, initPath, lower, filepath.Join(base, fmt.Sprint(c.name, i)), sockDir)
				cfg.SysfsPath = sysfs
				cfg.Security = &c.sec
				in, err := Spawn(ctx, cfg)
				if err != nil {
					b.Fatal(err)
				}
				killAndReap(in.PID)
			}
		})
	}
}

// BenchmarkExecTrue measures one exec over the control socket: dial, exec
// `true`, wait for its exit.
func BenchmarkExecTrue(b *testing.B) {
	s := newSandbox(b, nil)
	ctx := context.Background()
	req := ExecRequest{Args: []string{"/bin/true"}}
	b.ResetTimer()
	for range b.N {
		c, err := Dial(ctx, s.cfg.SocketPath)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Exec(ctx, req, [3]*os.File{}); err != nil {
			b.Fatal(err)
		}
		e, err := c.Wait(ctx)
		c.Close()
		if err != nil || e.Status != 0 {
			b.Fatalf("%v %v", e.Status, err)
		}
	}
}

// BenchmarkPing measures one request/reply round trip on an open connection,
// the floor under every other operation.
func BenchmarkPing(b *testing.B) {
	s := newSandbox(b, nil)
	c := s.dial(b)
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		if err := c.Ping(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUserNamespace measures what a user namespace adds to starting a
// process in the sandbox's other namespaces: the clone with CLONE_NEWUSER
// and writing a 65536-id uid and gid map to an unprivileged host range (the
// namespace part of issue 11's item 4; the init does not run in one yet).
func BenchmarkUserNamespace(b *testing.B) {
	requireRoot(b)
	for _, userns := range []bool{false, true} {
		b.Run(map[bool]string{false: "without", true: "with"}[userns], func(b *testing.B) {
			attr := &syscall.SysProcAttr{Cloneflags: cloneFlags}
			if userns {
				attr.Cloneflags |= syscall.CLONE_NEWUSER
				attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 1 << 30, Size: 65536}}
				attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 1 << 30, Size: 65536}}
			}
			for b.Loop() {
				pid, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{Sys: attr})
				if err != nil {
					b.Fatal(err)
				}
				var ws syscall.WaitStatus
				if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil || ws.ExitStatus() != 0 {
					b.Fatalf("wait: %v %v", ws, err)
				}
			}
		})
	}
}

// BenchmarkSpawnUserNS is BenchmarkSpawn (shared sysfs) without and with a
// user namespace (65536 ids, idmapped lower, bound /dev nodes).
func BenchmarkSpawnUserNS(b *testing.B) {
	requireRoot(b)
	initPath, lower, sockDir, base := installInit(b), makeLower(b), shortDir(b), b.TempDir()
	for _, d := range []string{filepath.Dir(initPath), base} {
		// Up to, never including, the shared temp dir (/tmp stays 1777).
		for p := d; p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
			if err := os.Chmod(p, 0o711); err != nil && p == d {
				b.Fatal(err)
			}
		}
	}
	sysfs := sharedSysfs(b)
	ctx := context.Background()
	n := 0
	for _, userns := range []bool{false, true} {
		b.Run(map[bool]string{false: "without", true: "with"}[userns], func(b *testing.B) {
			for b.Loop() {
				n++
				cfg := sandboxConfig(b, initPath, lower, filepath.Join(base, fmt.Sprint(n)), sockDir)
				cfg.SysfsPath = sysfs
				if userns {
					cfg.UserNS = &IDMap{HostID: 1 << 30, Size: 65536}
				}
				in, err := Spawn(ctx, cfg)
				if err != nil {
					b.Fatal(err)
				}
				c, err := Dial(ctx, cfg.SocketPath)
				if err == nil {
					err = c.Ping(ctx)
					c.Close()
				}
				killAndReap(in.PID)
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
