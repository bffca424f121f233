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
	// In matches when arg is one of Values.
	In
)

// ArgCond tests the low 32 bits of one syscall argument. The high half is
// ignored, which is exact for the arguments used here (the kernel truncates
// clone flags, personality and socket's address family to 32 bits).
type ArgCond struct {
	Index  int // 0..5
	Op     CondOp
	Mask   uint32   // MaskedAny
	Values []uint32 // NotIn, In
}

// namespaceFlags are the clone flags creating namespaces: Docker's mask
// (0x7e020000) plus CLONE_NEWTIME. CLONE_NEWTIME (0x80) overlaps clone(2)'s
// exit-signal byte, where it can only appear in calls the kernel rejects
// anyway (signal >= 128).
const namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
	unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// Address families Docker's profile refuses to socket(2).
const (
	afALG   = 38 // AF_ALG: the kernel crypto API
	afVSOCK = 40 // AF_VSOCK: host-guest sockets
)

// Default is the sandbox profile, an allow list equivalent to Docker's
// default profile for a container holding the OCI default capabilities (no
// CAP_SYS_ADMIN, CAP_SYS_PTRACE, CAP_SYS_TIME, ...): x86_64 only (other
// architectures kill the process, x32 numbers fail with EPERM), the
// syscalls Docker allows such a container allowed, with Docker's argument
// conditions on clone, personality and socket, and every other syscall
// number, including ones newer kernels add, failing with EPERM. clone3
// fails with ENOSYS so libc falls back to clone, whose flags can be
// inspected.
//
// dsec refuses a few calls Docker allows: ptrace, process_vm_readv and
// process_vm_writev (cross-process memory access; Docker allows them from
// kernel 4.8), name_to_handle_at (file handles of the host's file systems),
// adjtimex and clock_adjtime (clock state), and clone with CLONE_NEWTIME.
func Default() Profile {
	eperm := Errno(unix.EPERM)
	// Personalities Docker allows: PER_LINUX, PER_LINUX32, UNAME26,
	// UNAME26|PER_LINUX32 and 0xffffffff (query the current one).
	personalities := []uint32{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}
	return Profile{
		Arch:    unix.AUDIT_ARCH_X86_64,
		BadArch: KillProcess,
		X32:     eperm,
		Default: eperm,
		Rules: []Rule{
			{Comment: "clone3 flags live in memory BPF cannot read: make libc fall back to clone",
				Syscalls: []int{unix.SYS_CLONE3}, Action: Errno(unix.ENOSYS)},
			{Comment: "new namespaces need CAP_SYS_ADMIN",
				Syscalls: []int{unix.SYS_CLONE}, Action: eperm,
				Arg: &ArgCond{Index: 0, Op: MaskedAny, Mask: namespaceFlags}},
			{Comment: "clone without namespace flags",
				Syscalls: []int{unix.SYS_CLONE}, Action: Allow},
			{Comment: "only the personalities Docker allows",
				Syscalls: []int{unix.SYS_PERSONALITY}, Action: Allow,
				Arg: &ArgCond{Index: 0, Op: In, Values: personalities}},
			{Comment: "no kernel crypto API or vsock sockets",
				Syscalls: []int{unix.SYS_SOCKET}, Action: eperm,
				Arg: &ArgCond{Index: 0, Op: In, Values: []uint32{afALG, afVSOCK}}},
			{Comment: "other address families",
				Syscalls: []int{unix.SYS_SOCKET}, Action: Allow},
			{Comment: "what Docker allows without capabilities beyond OCI's default set (CAP_SYS_CHROOT: chroot)",
				Action: Allow, Syscalls: allowed()},
		},
	}
}

// allowed are the syscalls Docker's default profile allows on x86_64 to a
// container with the OCI default capabilities, without argument conditions,
// less dsec's own refusals (see Default), in number order.
func allowed() []int {
	return []int{
		unix.SYS_READ, unix.SYS_WRITE, unix.SYS_OPEN, unix.SYS_CLOSE, unix.SYS_STAT, unix.SYS_FSTAT,
		unix.SYS_LSTAT, unix.SYS_POLL, unix.SYS_LSEEK, unix.SYS_MMAP, unix.SYS_MPROTECT, unix.SYS_MUNMAP,
		unix.SYS_BRK, unix.SYS_RT_SIGACTION, unix.SYS_RT_SIGPROCMASK, unix.SYS_RT_SIGRETURN,
		unix.SYS_IOCTL, unix.SYS_PREAD64, unix.SYS_PWRITE64, unix.SYS_READV, unix.SYS_WRITEV,
		unix.SYS_ACCESS, unix.SYS_PIPE, unix.SYS_SELECT, unix.SYS_SCHED_YIELD, unix.SYS_MREMAP,
		unix.SYS_MSYNC, unix.SYS_MINCORE, unix.SYS_MADVISE, unix.SYS_SHMGET, unix.SYS_SHMAT,
		unix.SYS_SHMCTL, unix.SYS_DUP, unix.SYS_DUP2, unix.SYS_PAUSE, unix.SYS_NANOSLEEP,
		unix.SYS_GETITIMER, unix.SYS_ALARM, unix.SYS_SETITIMER, unix.SYS_GETPID, unix.SYS_SENDFILE,
		unix.SYS_CONNECT, unix.SYS_ACCEPT, unix.SYS_SENDTO, unix.SYS_RECVFROM, unix.SYS_SENDMSG,
		unix.SYS_RECVMSG, unix.SYS_SHUTDOWN, unix.SYS_BIND, unix.SYS_LISTEN, unix.SYS_GETSOCKNAME,
		unix.SYS_GETPEERNAME, unix.SYS_SOCKETPAIR, unix.SYS_SETSOCKOPT, unix.SYS_GETSOCKOPT,
		unix.SYS_FORK, unix.SYS_VFORK, unix.SYS_EXECVE, unix.SYS_EXIT, unix.SYS_WAIT4, unix.SYS_KILL,
		unix.SYS_UNAME, unix.SYS_SEMGET, unix.SYS_SEMOP, unix.SYS_SEMCTL, unix.SYS_SHMDT,
		unix.SYS_MSGGET, unix.SYS_MSGSND, unix.SYS_MSGRCV, unix.SYS_MSGCTL, unix.SYS_FCNTL,
		unix.SYS_FLOCK, unix.SYS_FSYNC, unix.SYS_FDATASYNC, unix.SYS_TRUNCATE, unix.SYS_FTRUNCATE,
		unix.SYS_GETDENTS, unix.SYS_GETCWD, unix.SYS_CHDIR, unix.SYS_FCHDIR, unix.SYS_RENAME,
		unix.SYS_MKDIR, unix.SYS_RMDIR, unix.SYS_CREAT, unix.SYS_LINK, unix.SYS_UNLINK, unix.SYS_SYMLINK,
		unix.SYS_READLINK, unix.SYS_CHMOD, unix.SYS_FCHMOD, unix.SYS_CHOWN, unix.SYS_FCHOWN,
		unix.SYS_LCHOWN, unix.SYS_UMASK, unix.SYS_GETTIMEOFDAY, unix.SYS_GETRLIMIT, unix.SYS_GETRUSAGE,
		unix.SYS_SYSINFO, unix.SYS_TIMES, unix.SYS_GETUID, unix.SYS_GETGID, unix.SYS_SETUID,
		unix.SYS_SETGID, unix.SYS_GETEUID, unix.SYS_GETEGID, unix.SYS_SETPGID, unix.SYS_GETPPID,
		unix.SYS_GETPGRP, unix.SYS_SETSID, unix.SYS_SETREUID, unix.SYS_SETREGID, unix.SYS_GETGROUPS,
		unix.SYS_SETGROUPS, unix.SYS_SETRESUID, unix.SYS_GETRESUID, unix.SYS_SETRESGID,
		unix.SYS_GETRESGID, unix.SYS_GETPGID, unix.SYS_SETFSUID, unix.SYS_SETFSGID, unix.SYS_GETSID,
		unix.SYS_CAPGET, unix.SYS_CAPSET, unix.SYS_RT_SIGPENDING, unix.SYS_RT_SIGTIMEDWAIT,
		unix.SYS_RT_SIGQUEUEINFO, unix.SYS_RT_SIGSUSPEND, unix.SYS_SIGALTSTACK, unix.SYS_UTIME,
		unix.SYS_MKNOD, unix.SYS_STATFS, unix.SYS_FSTATFS, unix.SYS_GETPRIORITY, unix.SYS_SETPRIORITY,
		unix.SYS_SCHED_SETPARAM, unix.SYS_SCHED_GETPARAM, unix.SYS_SCHED_SETSCHEDULER,
		unix.SYS_SCHED_GETSCHEDULER, unix.SYS_SCHED_GET_PRIORITY_MAX, unix.SYS_SCHED_GET_PRIORITY_MIN,
		unix.SYS_SCHED_RR_GET_INTERVAL, unix.SYS_MLOCK, unix.SYS_MUNLOCK, unix.SYS_MLOCKALL,
		unix.SYS_MUNLOCKALL, unix.SYS_MODIFY_LDT, unix.SYS_PRCTL, unix.SYS_ARCH_PRCTL,
		unix.SYS_SETRLIMIT, unix.SYS_CHROOT, unix.SYS_SYNC, unix.SYS_GETTID, unix.SYS_READAHEAD,
		unix.SYS_SETXATTR, unix.SYS_LSETXATTR, unix.SYS_FSETXATTR, unix.SYS_GETXATTR, unix.SYS_LGETXATTR,
		unix.SYS_FGETXATTR, unix.SYS_LISTXATTR, unix.SYS_LLISTXATTR, unix.SYS_FLISTXATTR,
		unix.SYS_REMOVEXATTR, unix.SYS_LREMOVEXATTR, unix.SYS_FREMOVEXATTR, unix.SYS_TKILL,
		unix.SYS_TIME, unix.SYS_FUTEX, unix.SYS_SCHED_SETAFFINITY, unix.SYS_SCHED_GETAFFINITY,
		unix.SYS_SET_THREAD_AREA, unix.SYS_IO_SETUP, unix.SYS_IO_DESTROY, unix.SYS_IO_GETEVENTS,
		unix.SYS_IO_SUBMIT, unix.SYS_IO_CANCEL, unix.SYS_GET_THREAD_AREA, unix.SYS_EPOLL_CREATE,
		unix.SYS_EPOLL_CTL_OLD, unix.SYS_EPOLL_WAIT_OLD, unix.SYS_REMAP_FILE_PAGES, unix.SYS_GETDENTS64,
		unix.SYS_SET_TID_ADDRESS, unix.SYS_RESTART_SYSCALL, unix.SYS_SEMTIMEDOP, unix.SYS_FADVISE64,
		unix.SYS_TIMER_CREATE, unix.SYS_TIMER_SETTIME, unix.SYS_TIMER_GETTIME, unix.SYS_TIMER_GETOVERRUN,
		unix.SYS_TIMER_DELETE, unix.SYS_CLOCK_GETTIME, unix.SYS_CLOCK_GETRES, unix.SYS_CLOCK_NANOSLEEP,
		unix.SYS_EXIT_GROUP, unix.SYS_EPOLL_WAIT, unix.SYS_EPOLL_CTL, unix.SYS_TGKILL, unix.SYS_UTIMES,
		unix.SYS_MQ_OPEN, unix.SYS_MQ_UNLINK, unix.SYS_MQ_TIMEDSEND, unix.SYS_MQ_TIMEDRECEIVE,
		unix.SYS_MQ_NOTIFY, unix.SYS_MQ_GETSETATTR, unix.SYS_WAITID, unix.SYS_IOPRIO_SET,
		unix.SYS_IOPRIO_GET, unix.SYS_INOTIFY_INIT, unix.SYS_INOTIFY_ADD_WATCH,
		unix.SYS_INOTIFY_RM_WATCH, unix.SYS_OPENAT, unix.SYS_MKDIRAT, unix.SYS_MKNODAT,
		unix.SYS_FCHOWNAT, unix.SYS_FUTIMESAT, unix.SYS_NEWFSTATAT, unix.SYS_UNLINKAT, unix.SYS_RENAMEAT,
		unix.SYS_LINKAT, unix.SYS_SYMLINKAT, unix.SYS_READLINKAT, unix.SYS_FCHMODAT, unix.SYS_FACCESSAT,
		unix.SYS_PSELECT6, unix.SYS_PPOLL, unix.SYS_SET_ROBUST_LIST, unix.SYS_GET_ROBUST_LIST,
		unix.SYS_SPLICE, unix.SYS_TEE, unix.SYS_SYNC_FILE_RANGE, unix.SYS_VMSPLICE, unix.SYS_UTIMENSAT,
		unix.SYS_EPOLL_PWAIT, unix.SYS_SIGNALFD, unix.SYS_TIMERFD_CREATE, unix.SYS_EVENTFD,
		unix.SYS_FALLOCATE, unix.SYS_TIMERFD_SETTIME, unix.SYS_TIMERFD_GETTIME, unix.SYS_ACCEPT4,
		unix.SYS_SIGNALFD4, unix.SYS_EVENTFD2, unix.SYS_EPOLL_CREATE1, unix.SYS_DUP3, unix.SYS_PIPE2,
		unix.SYS_INOTIFY_INIT1, unix.SYS_PREADV, unix.SYS_PWRITEV, unix.SYS_RT_TGSIGQUEUEINFO,
		unix.SYS_RECVMMSG, unix.SYS_FANOTIFY_MARK, unix.SYS_PRLIMIT64, unix.SYS_SYNCFS,
		unix.SYS_SENDMMSG, unix.SYS_GETCPU, unix.SYS_SCHED_SETATTR, unix.SYS_SCHED_GETATTR,
		unix.SYS_RENAMEAT2, unix.SYS_SECCOMP, unix.SYS_GETRANDOM, unix.SYS_MEMFD_CREATE,
		unix.SYS_EXECVEAT, unix.SYS_MEMBARRIER, unix.SYS_MLOCK2, unix.SYS_COPY_FILE_RANGE,
		unix.SYS_PREADV2, unix.SYS_PWRITEV2, unix.SYS_PKEY_MPROTECT, unix.SYS_PKEY_ALLOC,
		unix.SYS_PKEY_FREE, unix.SYS_STATX, unix.SYS_IO_PGETEVENTS, unix.SYS_RSEQ, unix.SYS_URETPROBE,
		unix.SYS_PIDFD_SEND_SIGNAL, unix.SYS_PIDFD_OPEN, unix.SYS_CLOSE_RANGE, unix.SYS_OPENAT2,
		unix.SYS_FACCESSAT2, unix.SYS_EPOLL_PWAIT2, unix.SYS_LANDLOCK_CREATE_RULESET,
		unix.SYS_LANDLOCK_ADD_RULE, unix.SYS_LANDLOCK_RESTRICT_SELF, unix.SYS_MEMFD_SECRET,
		unix.SYS_PROCESS_MRELEASE, unix.SYS_FUTEX_WAITV, unix.SYS_CACHESTAT, unix.SYS_FCHMODAT2,
		unix.SYS_MAP_SHADOW_STACK, unix.SYS_FUTEX_WAKE, unix.SYS_FUTEX_WAIT, unix.SYS_FUTEX_REQUEUE,
		unix.SYS_STATMOUNT, unix.SYS_LISTMOUNT, unix.SYS_MSEAL, unix.SYS_SETXATTRAT, unix.SYS_GETXATTRAT,
		unix.SYS_LISTXATTRAT, unix.SYS_REMOVEXATTRAT,
	}
}
