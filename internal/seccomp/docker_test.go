package seccomp

import (
	"encoding/json"
	"fmt"
	"math/bits"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/backend/initproto"
)

// dockerProfile is the part of Docker's seccomp profile JSON the comparison
// reads (testdata/README.md says where the file comes from).
type dockerProfile struct {
	DefaultAction   string       `json:"defaultAction"`
	DefaultErrnoRet *uint32      `json:"defaultErrnoRet"`
	Syscalls        []dockerRule `json:"syscalls"`
}

type dockerRule struct {
	Names    []string    `json:"names"`
	Action   string      `json:"action"`
	ErrnoRet *uint32     `json:"errnoRet"`
	Args     []dockerArg `json:"args"`
	Includes dockerScope `json:"includes"`
	Excludes dockerScope `json:"excludes"`
}

type dockerArg struct {
	Index    int    `json:"index"`
	Value    uint64 `json:"value"`
	ValueTwo uint64 `json:"valueTwo"`
	Op       string `json:"op"`
}

type dockerScope struct {
	Caps      []string `json:"caps"`
	Arches    []string `json:"arches"`
	MinKernel string   `json:"minKernel"`
}

// sandboxCaps is the capability set of a sandbox, pinned here as a literal
// list (TestSandboxCapsPinned checks it is initproto.DefaultCaps): Docker's
// profile allows more to a container holding more.
var sandboxCaps = map[string]int{
	"CAP_CHOWN": unix.CAP_CHOWN, "CAP_DAC_OVERRIDE": unix.CAP_DAC_OVERRIDE, "CAP_FOWNER": unix.CAP_FOWNER,
	"CAP_FSETID": unix.CAP_FSETID, "CAP_KILL": unix.CAP_KILL, "CAP_SETGID": unix.CAP_SETGID,
	"CAP_SETUID": unix.CAP_SETUID, "CAP_SETPCAP": unix.CAP_SETPCAP, "CAP_NET_BIND_SERVICE": unix.CAP_NET_BIND_SERVICE,
	"CAP_SYS_CHROOT": unix.CAP_SYS_CHROOT, "CAP_AUDIT_WRITE": unix.CAP_AUDIT_WRITE, "CAP_SETFCAP": unix.CAP_SETFCAP,
}

// notX86_64 are the names Docker's profile lists that x86_64 has no system
// call for (32-bit ABIs' and other architectures' calls). A name missing from
// both this list and x86_64Names fails the comparison, so a new x86_64 call
// in Docker's profile cannot go unnoticed.
var notX86_64 = []string{
	"_llseek", "_newselect", "chown32", "clock_adjtime64", "clock_getres_time64", "clock_gettime64",
	"clock_nanosleep_time64", "fadvise64_64", "fchown32", "fcntl64", "fstat64", "fstatat64", "fstatfs64",
	"ftruncate64", "futex_time64", "getegid32", "geteuid32", "getgid32", "getgroups32", "getresgid32",
	"getresuid32", "getuid32", "io_pgetevents_time64", "ipc", "lchown32", "lstat64", "mmap2",
	"mq_timedreceive_time64", "mq_timedsend_time64", "ppoll_time64", "pselect6_time64", "recv",
	"recvmmsg_time64", "riscv_hwprobe", "rt_sigtimedwait_time64", "sched_rr_get_interval_time64",
	"semtimedop_time64", "send", "sendfile64", "setfsgid32", "setfsuid32", "setgid32", "setgroups32",
	"setregid32", "setresgid32", "setresuid32", "setreuid32", "setuid32", "sigprocmask", "sigreturn",
	"socketcall", "stat64", "statfs64", "timer_gettime64", "timer_settime64", "timerfd_gettime64",
	"timerfd_settime64", "truncate64", "ugetrlimit", "utimensat_time64", "waitpid",
	"umount", "stime", "clock_settime64",
	// arm, ppc64le, s390 and riscv only
	"arm_fadvise64_64", "arm_sync_file_range", "sync_file_range2", "breakpoint", "cacheflush", "set_tls",
	"swapcontext", "s390_pci_mmio_read", "s390_pci_mmio_write", "s390_runtime_instr", "riscv_flush_icache",
}

// dsecRefusals are the calls dsec refuses although Docker allows them, each
// with the reason (Default's comment). The comparison fails on any other
// difference, and on a refusal listed here that no longer differs.
var dsecRefusals = map[string]string{
	"ptrace":            "cross-process access (Docker allows it from kernel 4.8)",
	"process_vm_readv":  "cross-process access",
	"process_vm_writev": "cross-process access",
	"name_to_handle_at": "file handles of the host's file systems",
	"adjtimex":          "clock state",
	"clock_adjtime":     "clock state",
	"clone":             "CLONE_NEWTIME",
}

func loadDocker(t *testing.T) dockerProfile {
	t.Helper()
	b, err := os.ReadFile("testdata/moby-seccomp-default.json")
	if err != nil {
		t.Fatal(err)
	}
	var p dockerProfile
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	if p.DefaultAction != "SCMP_ACT_ERRNO" || p.DefaultErrnoRet == nil {
		t.Fatalf("Docker's default action %s/%v: the comparison expects an allow list", p.DefaultAction, p.DefaultErrnoRet)
	}
	return p
}

// applies reports whether r is in force for an x86_64 container with
// sandboxCaps on the kernels dsec supports (6.1 and later).
func (r dockerRule) applies() (bool, error) {
	in, ex := r.Includes, r.Excludes
	if len(in.Arches) > 0 && !slices.Contains(in.Arches, "amd64") || slices.Contains(ex.Arches, "amd64") {
		return false, nil
	}
	for _, c := range in.Caps {
		if _, ok := sandboxCaps[c]; !ok {
			return false, nil
		}
	}
	for _, c := range ex.Caps {
		if _, ok := sandboxCaps[c]; ok {
			return false, nil
		}
	}
	if in.MinKernel != "" && kernelAfter61(in.MinKernel) || ex.MinKernel != "" {
		return false, fmt.Errorf("rule %v: kernel condition %q/%q: decide how dsec treats it", r.Names, in.MinKernel, ex.MinKernel)
	}
	return true, nil
}

func kernelAfter61(v string) bool {
	var major, minor int
	fmt.Sscanf(v, "%d.%d", &major, &minor)
	return major > 6 || major == 6 && minor > 1
}

func (a dockerArg) holds(args [6]uint64) (bool, error) {
	v := args[a.Index]
	switch a.Op {
	case "SCMP_CMP_EQ":
		return v == a.Value, nil
	case "SCMP_CMP_NE":
		return v != a.Value, nil
	case "SCMP_CMP_LT":
		return v < a.Value, nil
	case "SCMP_CMP_LE":
		return v <= a.Value, nil
	case "SCMP_CMP_GT":
		return v > a.Value, nil
	case "SCMP_CMP_GE":
		return v >= a.Value, nil
	case "SCMP_CMP_MASKED_EQ":
		return v&a.Value == a.ValueTwo, nil
	}
	return false, fmt.Errorf("unknown comparison %q", a.Op)
}

func (p dockerProfile) action(op string, errno *uint32) (Action, error) {
	switch op {
	case "SCMP_ACT_ALLOW":
		return Allow, nil
	case "SCMP_ACT_ERRNO":
		if errno == nil {
			errno = p.DefaultErrnoRet
		}
		return Errno(unix.Errno(*errno)), nil
	}
	return 0, fmt.Errorf("action %q not handled by the comparison", op)
}

// decide is what Docker's profile does with the call. Two rules in force
// that match one call with different actions are an error: libseccomp's
// precedence would then matter, and the comparison does not model it.
func (p dockerProfile) decide(name string, args [6]uint64) (Action, error) {
	var got []Action
	for _, r := range p.Syscalls {
		if !slices.Contains(r.Names, name) {
			continue
		}
		ok, err := r.applies()
		if err != nil || !ok {
			if err != nil {
				return 0, err
			}
			continue
		}
		match := true
		for _, a := range r.Args {
			h, err := a.holds(args)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", name, err)
			}
			match = match && h
		}
		if match {
			act, err := p.action(r.Action, r.ErrnoRet)
			if err != nil {
				return 0, err
			}
			got = append(got, act)
		}
	}
	slices.Sort(got)
	got = slices.Compact(got)
	switch len(got) {
	case 0:
		return p.action(p.DefaultAction, p.DefaultErrnoRet)
	case 1:
		return got[0], nil
	}
	return 0, fmt.Errorf("%s%v: rules in force disagree: %v", name, args, got)
}

// samples are the argument vectors worth trying for syscall name: all zero,
// and around every value a condition of Docker's or of prof compares the
// first two arguments with (each bit of a mask alone). Only the low 32 bits
// vary: dsec compares those (the kernel truncates the int arguments Docker
// tests), where libseccomp compares all 64.
func samples(d dockerProfile, prof Profile, name string, nr int) [][6]uint64 {
	vals := map[int]map[uint64]bool{0: {0: true}, 1: {0: true}}
	add := func(i int, v uint64) {
		if i < 2 && v <= 0xffffffff {
			vals[i][v] = true
		}
	}
	around := func(i int, v uint64) {
		add(i, v)
		add(i, v+1)
		if v > 0 {
			add(i, v-1)
		}
	}
	addMask := func(i int, m uint64) {
		for ; m != 0; m &= m - 1 {
			add(i, 1<<bits.TrailingZeros64(m))
		}
	}
	for _, r := range d.Syscalls {
		if !slices.Contains(r.Names, name) {
			continue
		}
		for _, a := range r.Args {
			if a.Op == "SCMP_CMP_MASKED_EQ" {
				addMask(a.Index, a.Value)
				around(a.Index, a.ValueTwo)
			} else {
				around(a.Index, a.Value)
			}
		}
	}
	for _, r := range prof.Rules {
		if r.Arg == nil || !slices.Contains(r.Syscalls, nr) {
			continue
		}
		addMask(r.Arg.Index, uint64(r.Arg.Mask))
		for _, v := range r.Arg.Values {
			around(r.Arg.Index, uint64(v))
		}
	}
	var out [][6]uint64
	for v0 := range vals[0] {
		for v1 := range vals[1] {
			out = append(out, [6]uint64{v0, v1})
		}
	}
	return out
}

// comparison is the outcome of comparing a compiled profile with Docker's.
type comparison struct {
	diffs            []string        // unexplained differences
	refusals         map[string]bool // dsecRefusals seen
	allowed, refused int             // syscall numbers Docker allows (at some arguments) and refuses
}

// compareWithDocker runs prog (compiled from prof) on every x86_64 syscall
// number below 600, each at its sample arguments, against Docker's profile.
func compareWithDocker(t *testing.T, d dockerProfile, prof Profile, prog []unix.SockFilter) comparison {
	t.Helper()
	c := comparison{refusals: map[string]bool{}}
	for nr := 0; nr < 600; nr++ {
		name, known := SyscallName(nr)
		anyAllowed := false
		for _, args := range samples(d, prof, name, nr) {
			want, err := d.decide(name, args)
			if err != nil {
				t.Fatal(err)
			}
			if !known {
				want = Errno(unix.EPERM) // no such name in Docker's profile: the default
			}
			anyAllowed = anyAllowed || want == Allow
			got, err := run(prog, seccompData{Nr: int32(nr), Arch: unix.AUDIT_ARCH_X86_64, Args: args})
			if err != nil {
				t.Fatal(err)
			}
			if got == want {
				continue
			}
			_, listed := dsecRefusals[name]
			explained := listed && want == Allow && got == Errno(unix.EPERM) &&
				(name != "clone" || args[0]&unix.CLONE_NEWTIME != 0)
			if explained {
				c.refusals[name] = true
				continue
			}
			c.diffs = append(c.diffs, fmt.Sprintf("%s (%d) args %#x: dsec %v, Docker %v", name, nr, args[:2], got, want))
		}
		if anyAllowed {
			c.allowed++
		} else {
			c.refused++
		}
	}
	return c
}

// TestDockerEquivalent: dsec's default profile decides every x86_64 system
// call as Docker's default profile does for a container with the sandbox's
// capabilities (same action, same errno: EPERM, ENOSYS for clone3), at
// every argument value Docker's conditions (clone's namespace flags,
// personality's values, socket's address families) or dsec's tell apart,
// apart from dsec's listed extra refusals.
func TestDockerEquivalent(t *testing.T) {
	d := loadDocker(t)
	for _, r := range d.Syscalls {
		for _, n := range r.Names {
			if _, ok := SyscallNumber(n); !ok && !slices.Contains(notX86_64, n) {
				t.Errorf("Docker's profile names %q, neither an x86_64 system call nor listed in notX86_64", n)
			}
		}
	}
	p := Default()
	c := compareWithDocker(t, d, p, compileDefault(t))
	for _, diff := range c.diffs {
		t.Error(diff)
	}
	var stale []string
	for name := range dsecRefusals {
		if !c.refusals[name] {
			stale = append(stale, name)
		}
	}
	sort.Strings(stale)
	if len(stale) > 0 {
		t.Errorf("dsecRefusals lists %v, where dsec and Docker agree", stale)
	}
	// a comparison that decided nothing would pass too
	if c.allowed < 290 || c.refused < 250 {
		t.Errorf("%d syscall numbers allowed and %d refused by Docker: the comparison ran on too little", c.allowed, c.refused)
	}
	t.Logf("%d syscall numbers allowed by Docker's profile, %d refused; dsec refuses %d more", c.allowed, c.refused, len(c.refusals))
}

// TestDockerComparisonCanFail: the comparison reports a profile that drops
// one allowed syscall, allows one more, or loses an argument condition.
func TestDockerComparisonCanFail(t *testing.T) {
	d := loadDocker(t)
	weakenings := map[string]func(p *Profile){
		"getpid dropped": func(p *Profile) {
			last := &p.Rules[len(p.Rules)-1]
			last.Syscalls = slices.DeleteFunc(slices.Clone(last.Syscalls), func(nr int) bool { return nr == unix.SYS_GETPID })
		},
		"mount allowed": func(p *Profile) {
			p.Rules = append(p.Rules, Rule{Syscalls: []int{unix.SYS_MOUNT}, Action: Allow})
		},
		"AF_VSOCK allowed": func(p *Profile) {
			p.Rules = slices.DeleteFunc(p.Rules, func(r Rule) bool { return r.Arg != nil && r.Arg.Op == In && r.Action != Allow })
		},
		"clone namespaces allowed": func(p *Profile) {
			p.Rules = slices.DeleteFunc(p.Rules, func(r Rule) bool { return r.Arg != nil && r.Arg.Op == MaskedAny })
		},
		"clone3 EPERM": func(p *Profile) { p.Rules[0].Action = Errno(unix.EPERM) },
		"personality unrestricted": func(p *Profile) {
			p.Rules = append(p.Rules, Rule{Syscalls: []int{unix.SYS_PERSONALITY}, Action: Allow})
		},
	}
	for name, weaken := range weakenings {
		p := Default()
		p.Rules = slices.Clone(p.Rules)
		weaken(&p)
		prog, err := p.Compile()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c := compareWithDocker(t, d, p, prog)
		if len(c.diffs) == 0 {
			t.Errorf("%s: the comparison found no difference", name)
			continue
		}
		t.Logf("%s: %s", name, strings.Join(c.diffs[:min(2, len(c.diffs))], "; "))
	}
}

// TestSandboxCapsPinned: the capability set the comparison assumes is the
// one sandboxes get.
func TestSandboxCapsPinned(t *testing.T) {
	var want []int
	for _, c := range sandboxCaps {
		want = append(want, c)
	}
	if got := initproto.DefaultCaps(); got != initproto.CapSet(want...) {
		t.Fatalf("sandboxes hold capabilities %#x, the Docker comparison assumes %#x", got, initproto.CapSet(want...))
	}
}
