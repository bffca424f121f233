package seccomp

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func compileDefault(t *testing.T) []unix.SockFilter {
	t.Helper()
	prog, err := Default().Compile()
	if err != nil {
		t.Fatal(err)
	}
	return prog
}

func x86(nr int, args ...uint64) seccompData {
	d := seccompData{Nr: int32(nr), Arch: unix.AUDIT_ARCH_X86_64}
	copy(d.Args[:], args)
	return d
}

func TestDefaultDecisions(t *testing.T) {
	prog := compileDefault(t)
	eperm, enosys := Errno(unix.EPERM), Errno(unix.ENOSYS)
	cases := []struct {
		name string
		data seccompData
		want Action
	}{
		{"mount", x86(unix.SYS_MOUNT), eperm},
		{"read", x86(unix.SYS_READ), Allow},
		{"getpid", x86(unix.SYS_GETPID), Allow},
		{"chroot", x86(unix.SYS_CHROOT), Allow},
		{"pidfd_getfd", x86(unix.SYS_PIDFD_GETFD), eperm},
		{"sethostname", x86(unix.SYS_SETHOSTNAME), eperm},
		{"get_mempolicy", x86(unix.SYS_GET_MEMPOLICY), eperm},
		{"listns", x86(unix.SYS_LISTNS), eperm},
		{"socket(AF_INET)", x86(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM), Allow},
		{"socket(AF_UNIX)", x86(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM), Allow},
		{"socket(AF_NFC)", x86(unix.SYS_SOCKET, unix.AF_NFC), Allow},
		{"socket(AF_KCM)", x86(unix.SYS_SOCKET, unix.AF_KCM), Allow},
		{"socket(AF_ALG)", x86(unix.SYS_SOCKET, unix.AF_ALG), eperm},
		{"socket(AF_VSOCK)", x86(unix.SYS_SOCKET, unix.AF_VSOCK), eperm},
		{"socket(AF_VSOCK, high bits)", x86(unix.SYS_SOCKET, 1<<32|unix.AF_VSOCK), eperm},
		{"unshare", x86(unix.SYS_UNSHARE, unix.CLONE_NEWNS), eperm},
		{"unshare(0)", x86(unix.SYS_UNSHARE, 0), eperm},
		{"clone(CLONE_NEWUSER)", x86(unix.SYS_CLONE, unix.CLONE_NEWUSER|uint64(unix.SIGCHLD)), eperm},
		{"clone(CLONE_NEWNET)", x86(unix.SYS_CLONE, unix.CLONE_NEWNET), eperm},
		{"clone(CLONE_NEWTIME)", x86(unix.SYS_CLONE, unix.CLONE_NEWTIME), eperm},
		{"clone(SIGCHLD)", x86(unix.SYS_CLONE, uint64(unix.SIGCHLD)), Allow},
		{"clone(thread)", x86(unix.SYS_CLONE, unix.CLONE_VM|unix.CLONE_FS|unix.CLONE_FILES|unix.CLONE_SIGHAND|unix.CLONE_THREAD|unix.CLONE_SYSVSEM|unix.CLONE_SETTLS|unix.CLONE_PARENT_SETTID|unix.CLONE_CHILD_CLEARTID), Allow},
		{"clone(high bits only)", x86(unix.SYS_CLONE, 1<<40|uint64(unix.SIGCHLD)), Allow},
		{"clone3", x86(unix.SYS_CLONE3), enosys},
		{"wrong arch", seccompData{Nr: unix.SYS_READ, Arch: unix.AUDIT_ARCH_I386}, KillProcess},
		{"aarch64 mount", seccompData{Nr: 40, Arch: unix.AUDIT_ARCH_AARCH64}, KillProcess},
		{"x32 read", x86(x32Bit | unix.SYS_READ), eperm},
		{"x32 getpid", x86(x32Bit | unix.SYS_GETPID), eperm},
		{"personality(0)", x86(unix.SYS_PERSONALITY, 0), Allow},
		{"personality(PER_LINUX32)", x86(unix.SYS_PERSONALITY, 8), Allow},
		{"personality(UNAME26)", x86(unix.SYS_PERSONALITY, 0x20000), Allow},
		{"personality(UNAME26|PER_LINUX32)", x86(unix.SYS_PERSONALITY, 0x20008), Allow},
		{"personality(query)", x86(unix.SYS_PERSONALITY, 0xffffffff), Allow},
		{"personality(READ_IMPLIES_EXEC)", x86(unix.SYS_PERSONALITY, 0x400000), eperm},
		{"personality(ADDR_NO_RANDOMIZE)", x86(unix.SYS_PERSONALITY, 0x0040000), eperm},
		{"ptrace", x86(unix.SYS_PTRACE), eperm},
		{"bpf", x86(unix.SYS_BPF), eperm},
		{"io_uring_setup", x86(unix.SYS_IO_URING_SETUP), eperm},
		{"setns", x86(unix.SYS_SETNS), eperm},
		{"keyctl", x86(unix.SYS_KEYCTL), eperm},
		{"reboot", x86(unix.SYS_REBOOT), eperm},
		{"mbind", x86(unix.SYS_MBIND), eperm},
		{"syslog", x86(unix.SYS_SYSLOG), eperm},
		{"open_by_handle_at", x86(unix.SYS_OPEN_BY_HANDLE_AT), eperm},
		{"execve", x86(unix.SYS_EXECVE), Allow},
		{"past the highest nr", x86(unix.SYS_RSEQ_SLICE_YIELD + 1), eperm},
		{"far past the highest nr", x86(5000), eperm},
	}
	for _, c := range cases {
		got, err := run(prog, c.data)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// Every syscall listed in the profile without a condition must get its
// rule's action, and all numbers not listed the default (EPERM).
func TestDefaultEveryListedSyscall(t *testing.T) {
	p := Default()
	prog := compileDefault(t)
	listed := map[int]Action{}
	conditional := map[int]bool{} // checked in TestDefaultDecisions
	for _, r := range p.Rules {
		for _, nr := range r.Syscalls {
			if _, dup := listed[nr]; dup {
				t.Errorf("syscall %d listed twice", nr)
			}
			if r.Arg == nil {
				listed[nr] = r.Action
			} else {
				conditional[nr] = true
			}
		}
	}
	if p.Default != Errno(unix.EPERM) {
		t.Fatalf("default action %v, want EPERM (an allow list)", p.Default)
	}
	for nr := 0; nr < 600; nr++ {
		want, ok := listed[nr]
		if conditional[nr] && !ok {
			continue
		}
		if !ok {
			want = p.Default
		}
		got, err := run(prog, x86(nr))
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("syscall %d: %v, want %v", nr, got, want)
		}
	}
}

func TestProgramLength(t *testing.T) {
	prog := compileDefault(t)
	if len(prog) >= unix.BPF_MAXINSNS {
		t.Fatalf("%d instructions, kernel limit %d", len(prog), unix.BPF_MAXINSNS)
	}
	t.Logf("default program: %d instructions", len(prog))
}

// Every syscall number takes a short path through the default program: the
// kernel emulates the program for every number when a filter is attached
// (once per FnCall run and per sandbox), and runs it on every system call
// its cache cannot decide. A single chain of tests took ~85 steps for an
// allowed call and cost 150-190 µs per install; the search over runs of
// numbers takes at most 19 for the default allow list (~37 µs per install).
func TestDefaultShortPaths(t *testing.T) {
	prog := compileDefault(t)
	worst, total := 0, 0
	for nr := 0; nr < 512; nr++ {
		_, steps, err := runSteps(prog, x86(nr))
		if err != nil {
			t.Fatal(err)
		}
		worst = max(worst, steps)
		total += steps
	}
	t.Logf("steps per syscall number: worst %d, mean %.1f", worst, float64(total)/512)
	if worst > 24 {
		t.Errorf("a syscall number takes %d steps through the filter, want <= 24", worst)
	}
}

// A profile far larger than the default forces several return blocks; every
// jump must still fit and every rule still apply.
func TestLargeProfileChunks(t *testing.T) {
	p := Profile{Arch: unix.AUDIT_ARCH_X86_64, BadArch: KillProcess, X32: Errno(unix.EPERM), Default: Allow}
	for nr := 0; nr < 1200; nr += 2 {
		p.Rules = append(p.Rules, Rule{Syscalls: []int{nr}, Action: Errno(unix.Errno(1 + nr%7))})
		if nr%50 == 0 {
			p.Rules = append(p.Rules, Rule{Syscalls: []int{nr + 1}, Action: Errno(unix.EACCES),
				Arg: &ArgCond{Index: 2, Op: NotIn, Values: []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}})
		}
	}
	prog, err := p.Compile()
	if err != nil {
		t.Fatal(err)
	}
	if len(prog) < 600 {
		t.Fatalf("only %d instructions", len(prog))
	}
	for nr := 0; nr < 1200; nr++ {
		want := Allow
		if nr%2 == 0 {
			want = Errno(unix.Errno(1 + nr%7))
		}
		got, err := run(prog, x86(nr, 0, 0, 99))
		if err != nil {
			t.Fatal(err)
		}
		if nr%2 == 1 && (nr-1)%50 == 0 {
			want = Errno(unix.EACCES)
			if g2, _ := run(prog, x86(nr, 0, 0, 5)); g2 != Allow {
				t.Errorf("syscall %d arg 5: %v, want allow", nr, g2)
			}
		}
		if got != want {
			t.Errorf("syscall %d: %v, want %v", nr, got, want)
		}
	}
}

func TestCompileRejectsInvalid(t *testing.T) {
	base := Default()
	cases := map[string]func(p *Profile){
		"no arch":     func(p *Profile) { p.Arch = 0 },
		"bad default": func(p *Profile) { p.Default = 0x12340000 },
		"empty rule":  func(p *Profile) { p.Rules = append(p.Rules, Rule{Action: Allow}) },
		"negative nr": func(p *Profile) { p.Rules = append(p.Rules, Rule{Syscalls: []int{-1}, Action: Allow}) },
		"arg index": func(p *Profile) {
			p.Rules = append(p.Rules, Rule{Syscalls: []int{1}, Action: Allow, Arg: &ArgCond{Index: 6, Op: MaskedAny, Mask: 1}})
		},
		"empty mask": func(p *Profile) {
			p.Rules = append(p.Rules, Rule{Syscalls: []int{1}, Action: Allow, Arg: &ArgCond{Op: MaskedAny}})
		},
		"unknown op": func(p *Profile) {
			p.Rules = append(p.Rules, Rule{Syscalls: []int{1}, Action: Allow, Arg: &ArgCond{Op: 9}})
		},
		"too many vals": func(p *Profile) {
			p.Rules = append(p.Rules, Rule{Syscalls: []int{1}, Action: Allow, Arg: &ArgCond{Op: NotIn, Values: make([]uint32, 65)}})
		},
		"too long": func(p *Profile) {
			// alternating actions: no two neighbours share a segment
			for nr := range 5000 {
				p.Rules = append(p.Rules, Rule{Syscalls: []int{nr}, Action: Errno(unix.Errno(1 + nr%2))})
			}
		},
	}
	for name, mutate := range cases {
		p := base
		p.Rules = append([]Rule(nil), base.Rules...)
		mutate(&p)
		if _, err := p.Compile(); err == nil {
			t.Errorf("%s: compiled", name)
		}
	}
}

func TestEncode(t *testing.T) {
	prog := []unix.SockFilter{{Code: 0x20, Jt: 1, Jf: 2, K: 0x11223344}, {Code: 0x06, K: unix.SECCOMP_RET_ALLOW}}
	want := []byte{0x20, 0, 1, 2, 0x44, 0x33, 0x22, 0x11, 0x06, 0, 0, 0, 0, 0, 0xff, 0x7f}
	if got := Encode(prog); !bytes.Equal(got, want) {
		t.Fatalf("Encode = % x, want % x", got, want)
	}
	full := Encode(compileDefault(t))
	if len(full)%8 != 0 || binary.LittleEndian.Uint32(full[4:]) != 4 {
		t.Fatalf("default program encodes oddly: first insn % x", full[:8])
	}
}

func TestMemFD(t *testing.T) {
	prog := compileDefault(t)
	f, err := MemFD(prog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, 8*len(prog)+8)
	n, err := f.ReadAt(got, 0)
	if n != 8*len(prog) || !bytes.Equal(got[:n], Encode(prog)) {
		t.Fatalf("memfd holds %d bytes (%v), want the %d-byte encoding", n, err, 8*len(prog))
	}
	seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := unix.F_SEAL_WRITE | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	if seals&want != want {
		t.Errorf("seals %#x, want %#x", seals, want)
	}
	if _, err := f.WriteAt([]byte{1}, 0); err == nil {
		t.Error("write to sealed memfd succeeded")
	}
	if err := f.Truncate(0); err == nil {
		t.Error("truncate of sealed memfd succeeded")
	}
}

func TestActionString(t *testing.T) {
	for a, want := range map[Action]string{Allow: "allow", KillProcess: "kill_process", Errno(unix.EPERM): "errno(EPERM)"} {
		if got := a.String(); !strings.EqualFold(got, want) {
			t.Errorf("%#x.String() = %q, want %q", uint32(a), got, want)
		}
	}
}
