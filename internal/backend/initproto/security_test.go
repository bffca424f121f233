package initproto

import (
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// pinnedCaps is sandbox root's capability set, written out: Docker's default
// set without CAP_MKNOD and CAP_NET_RAW. A change to DefaultCaps must change
// this list too, by hand.
var pinnedCaps = map[string]uint{
	"CAP_CHOWN": unix.CAP_CHOWN, "CAP_DAC_OVERRIDE": unix.CAP_DAC_OVERRIDE, "CAP_FOWNER": unix.CAP_FOWNER,
	"CAP_FSETID": unix.CAP_FSETID, "CAP_KILL": unix.CAP_KILL, "CAP_SETGID": unix.CAP_SETGID,
	"CAP_SETUID": unix.CAP_SETUID, "CAP_SETPCAP": unix.CAP_SETPCAP, "CAP_NET_BIND_SERVICE": unix.CAP_NET_BIND_SERVICE,
	"CAP_SYS_CHROOT": unix.CAP_SYS_CHROOT, "CAP_AUDIT_WRITE": unix.CAP_AUDIT_WRITE, "CAP_SETFCAP": unix.CAP_SETFCAP,
}

// pinnedCapsHex is pinnedCaps as /proc/PID/status shows it (CapEff and friends);
// the container and e2e escape probes want the same value.
const pinnedCapsHex = 0x00000000a00405fb

// pinnedMasked are the masked paths, written out (see DefaultMasked for why
// each is there).
var pinnedMasked = []string{
	"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys",
	"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
	"/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
	"/proc/kpagecgroup", "/proc/kpageflags", "/proc/kpagecount",
	"/proc/kallsyms", "/proc/vmallocinfo", "/proc/slabinfo", "/proc/pagetypeinfo",
	"/proc/iomem", "/proc/ioports", "/proc/modules", "/proc/mtrr", "/proc/kmsg",
	"/proc/lock_stat", "/proc/config.gz", "/proc/vmcore",
	"/proc/buddyinfo", "/proc/zoneinfo", "/proc/key-users",
	"/proc/program_cpu",
	"/sys/kernel/boot_params", "/sys/kernel/mm/damon", "/sys/kernel/mm/page_idle", "/sys/kernel/slab",
	"/sys/kernel/debug", "/sys/kernel/tracing", "/sys/kernel/security", "/sys/kernel/vmcoreinfo",
}

// TestDefaultsPinned compares the default capability set and masked paths with
// the lists above: the defaults are what every other test compares a sandbox
// with, so a widened default (a capability added, a masked path dropped) must
// fail here.
func TestDefaultsPinned(t *testing.T) {
	var want uint64
	for _, c := range pinnedCaps {
		want |= 1 << c
	}
	if got := DefaultCaps(); got != want {
		for c := uint(0); c < 64; c++ {
			if got&(1<<c) != 0 && want&(1<<c) == 0 {
				t.Errorf("DefaultCaps has capability %d, not in the pinned list", c)
			}
		}
		for name, c := range pinnedCaps {
			if got&(1<<c) == 0 {
				t.Errorf("DefaultCaps lacks %s", name)
			}
		}
	}
	if want != pinnedCapsHex {
		t.Errorf("pinnedCaps = %#x, pinnedCapsHex = %#x", want, pinnedCapsHex)
	}
	got := DefaultMasked()
	for _, p := range pinnedMasked {
		if !slices.Contains(got, p) {
			t.Errorf("DefaultMasked lacks %s", p)
		}
	}
	for _, p := range got {
		if !slices.Contains(pinnedMasked, p) {
			t.Errorf("DefaultMasked has %s, not in the pinned list (add it there)", p)
		}
	}
	if len(got) != len(pinnedMasked) {
		t.Errorf("DefaultMasked has %d entries, the pinned list %d", len(got), len(pinnedMasked))
	}
}
