package seccomp

import (
	"golang.org/x/sys/unix"
)

// Profile is a data-driven seccomp policy for one architecture: rules are
// tried in order and the first whose syscall (and argument condition, if
// any) matches decides; unmatched syscalls get Default.
type Profile struct {
	Arch    uint32 // AUDIT_ARCH_* the program accepts
	BadArch Action // for any other seccomp_data.arch
	// X32 is for syscall numbers with the x32 ABI bit (0x40000000) set;
	// only checked when Arch is AUDIT_ARCH_X86_64.
	X32     Action
	Default Action
	Rules   []Rule
}

// Rule applies Action to the listed syscalls, or only to those calls whose
// argument satisfies Arg when it is set.
type Rule struct {
	Comment  string // why, for readers and error messages
	Syscalls []int  // syscall numbers for Profile.Arch (unix.SYS_*)
	Action   Action
	Arg      *ArgCond
}

// CondOp is an argument comparison.
type CondOp int

const (
	// MaskedAny matches when arg & Mask != 0.
	MaskedAny CondOp = iota + 1
	// NotIn matches when arg is none of Values.
	NotIn
)

// ArgCond tests the low 32 bits of one syscall argument. The high half is
// ignored, which is exact for the arguments used here (the kernel truncates
// clone flags and personality to 32 bits).
type ArgCond struct {
	Index  int // 0..5
	Op     CondOp
	Mask   uint32   // MaskedAny
	Values []uint32 // NotIn
}

// namespaceFlags are the clone flags creating namespaces. CLONE_NEWTIME
// (0x80) overlaps clone(2)'s exit-signal byte, where it can only appear in
// calls the kernel rejects anyway (signal >= 128).
const namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
	unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// Default is the sandbox profile: x86_64 only, x32 refused, and the
// syscalls moby's default profile denies to a container with the OCI
// default capability set fail with EPERM. clone3 fails with ENOSYS so libc
// falls back to clone, whose flags can be inspected.
func Default() Profile {
	eperm := Errno(unix.EPERM)
	// Personalities Docker allows: PER_LINUX, PER_LINUX32, UNAME26,
	// UNAME26|PER_LINUX32 and 0xffffffff (query the current one).
	allowedPersonalities := []uint32{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}
	return Profile{
		Arch:    unix.AUDIT_ARCH_X86_64,
		BadArch: KillProcess,
		X32:     eperm,
		Default: Allow,
		Rules: []Rule{
			{Comment: "clone3 flags live in memory BPF cannot read: make libc fall back to clone",
				Syscalls: []int{unix.SYS_CLONE3}, Action: Errno(unix.ENOSYS)},
			{Comment: "new namespaces need CAP_SYS_ADMIN",
				Syscalls: []int{unix.SYS_CLONE}, Action: eperm,
				Arg: &ArgCond{Index: 0, Op: MaskedAny, Mask: namespaceFlags}},
			{Comment: "only the personalities moby allows",
				Syscalls: []int{unix.SYS_PERSONALITY}, Action: eperm,
				Arg: &ArgCond{Index: 0, Op: NotIn, Values: allowedPersonalities}},
			{Comment: "mounts and namespaces (CAP_SYS_ADMIN)", Action: eperm, Syscalls: []int{
				unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE,
				unix.SYS_OPEN_TREE_ATTR, unix.SYS_FSOPEN, unix.SYS_FSCONFIG, unix.SYS_FSMOUNT,
				unix.SYS_FSPICK, unix.SYS_MOUNT_SETATTR, unix.SYS_PIVOT_ROOT, unix.SYS_UNSHARE,
				unix.SYS_SETNS, unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_QUOTACTL,
				unix.SYS_QUOTACTL_FD, unix.SYS_NAME_TO_HANDLE_AT, unix.SYS_OPEN_BY_HANDLE_AT,
				unix.SYS_LOOKUP_DCOOKIE, unix.SYS_FANOTIFY_INIT, unix.SYS_NFSSERVCTL,
			}},
			{Comment: "kernel modules, kexec, reboot, accounting", Action: eperm, Syscalls: []int{
				unix.SYS_CREATE_MODULE, unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE,
				unix.SYS_DELETE_MODULE, unix.SYS_GET_KERNEL_SYMS, unix.SYS_QUERY_MODULE,
				unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD, unix.SYS_REBOOT, unix.SYS_ACCT,
			}},
			{Comment: "clock (CAP_SYS_TIME)", Action: eperm, Syscalls: []int{
				unix.SYS_CLOCK_ADJTIME, unix.SYS_CLOCK_SETTIME, unix.SYS_SETTIMEOFDAY, unix.SYS_ADJTIMEX,
			}},
			{Comment: "keyrings are not namespaced", Action: eperm, Syscalls: []int{
				unix.SYS_ADD_KEY, unix.SYS_KEYCTL, unix.SYS_REQUEST_KEY,
			}},
			{Comment: "tracing and cross-process access (CAP_SYS_PTRACE)", Action: eperm, Syscalls: []int{
				unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV,
				unix.SYS_KCMP, unix.SYS_PERF_EVENT_OPEN,
			}},
			{Comment: "kernel attack surface moby blocks", Action: eperm, Syscalls: []int{
				unix.SYS_BPF, unix.SYS_USERFAULTFD, unix.SYS_IO_URING_SETUP,
				unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
			}},
			{Comment: "NUMA policy (CAP_SYS_NICE)", Action: eperm, Syscalls: []int{
				unix.SYS_MBIND, unix.SYS_SET_MEMPOLICY, unix.SYS_SET_MEMPOLICY_HOME_NODE,
				unix.SYS_MIGRATE_PAGES, unix.SYS_MOVE_PAGES,
			}},
			{Comment: "obsolete or host-global", Action: eperm, Syscalls: []int{
				unix.SYS_SYSFS, unix.SYS__SYSCTL, unix.SYS_SYSLOG, unix.SYS_USELIB, unix.SYS_USTAT,
				unix.SYS_IOPL, unix.SYS_IOPERM, unix.SYS_VHANGUP,
			}},
		},
	}
}
