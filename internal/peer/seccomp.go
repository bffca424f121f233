package peer

import (
	"fmt"
	"math/bits"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/seccomp"
)

// syscallNames names the x86_64 syscalls dsec's profile lists (the runtime
// spec names syscalls; dsec's profile numbers them). TestSeccompNames keeps it
// complete.
var syscallNames = map[int]string{
	unix.SYS_CLONE3: "clone3", unix.SYS_CLONE: "clone", unix.SYS_PERSONALITY: "personality",
	unix.SYS_MOUNT: "mount", unix.SYS_UMOUNT2: "umount2", unix.SYS_MOVE_MOUNT: "move_mount",
	unix.SYS_OPEN_TREE: "open_tree", unix.SYS_OPEN_TREE_ATTR: "open_tree_attr", unix.SYS_FSOPEN: "fsopen",
	unix.SYS_FSCONFIG: "fsconfig", unix.SYS_FSMOUNT: "fsmount", unix.SYS_FSPICK: "fspick",
	unix.SYS_MOUNT_SETATTR: "mount_setattr", unix.SYS_PIVOT_ROOT: "pivot_root", unix.SYS_UNSHARE: "unshare",
	unix.SYS_SETNS: "setns", unix.SYS_SWAPON: "swapon", unix.SYS_SWAPOFF: "swapoff", unix.SYS_QUOTACTL: "quotactl",
	unix.SYS_QUOTACTL_FD: "quotactl_fd", unix.SYS_NAME_TO_HANDLE_AT: "name_to_handle_at",
	unix.SYS_OPEN_BY_HANDLE_AT: "open_by_handle_at", unix.SYS_LOOKUP_DCOOKIE: "lookup_dcookie",
	unix.SYS_FANOTIFY_INIT: "fanotify_init", unix.SYS_NFSSERVCTL: "nfsservctl",
	unix.SYS_CREATE_MODULE: "create_module", unix.SYS_INIT_MODULE: "init_module", unix.SYS_FINIT_MODULE: "finit_module",
	unix.SYS_DELETE_MODULE: "delete_module", unix.SYS_GET_KERNEL_SYMS: "get_kernel_syms",
	unix.SYS_QUERY_MODULE: "query_module", unix.SYS_KEXEC_LOAD: "kexec_load", unix.SYS_KEXEC_FILE_LOAD: "kexec_file_load",
	unix.SYS_REBOOT: "reboot", unix.SYS_ACCT: "acct", unix.SYS_CLOCK_ADJTIME: "clock_adjtime",
	unix.SYS_CLOCK_SETTIME: "clock_settime", unix.SYS_SETTIMEOFDAY: "settimeofday", unix.SYS_ADJTIMEX: "adjtimex",
	unix.SYS_ADD_KEY: "add_key", unix.SYS_KEYCTL: "keyctl", unix.SYS_REQUEST_KEY: "request_key",
	unix.SYS_PTRACE: "ptrace", unix.SYS_PROCESS_VM_READV: "process_vm_readv", unix.SYS_PROCESS_VM_WRITEV: "process_vm_writev",
	unix.SYS_KCMP: "kcmp", unix.SYS_PERF_EVENT_OPEN: "perf_event_open", unix.SYS_BPF: "bpf",
	unix.SYS_USERFAULTFD: "userfaultfd", unix.SYS_IO_URING_SETUP: "io_uring_setup",
	unix.SYS_IO_URING_ENTER: "io_uring_enter", unix.SYS_IO_URING_REGISTER: "io_uring_register",
	unix.SYS_MBIND: "mbind", unix.SYS_SET_MEMPOLICY: "set_mempolicy", unix.SYS_SET_MEMPOLICY_HOME_NODE: "set_mempolicy_home_node",
	unix.SYS_MIGRATE_PAGES: "migrate_pages", unix.SYS_MOVE_PAGES: "move_pages", unix.SYS_SYSFS: "sysfs",
	unix.SYS__SYSCTL: "_sysctl", unix.SYS_SYSLOG: "syslog", unix.SYS_USELIB: "uselib", unix.SYS_USTAT: "ustat",
	unix.SYS_IOPL: "iopl", unix.SYS_IOPERM: "ioperm", unix.SYS_VHANGUP: "vhangup",
}

// SeccompFrom translates a dsec seccomp profile into the runtime spec's form,
// so a peer container runs under the same filter as a dsec sandbox. It also
// returns what the spec's form cannot say exactly: a NotIn condition under a
// default-allow profile (personality's allowed values) is left out, and said
// so. A MaskedAny condition becomes one masked-equal rule per bit.
func SeccompFrom(p seccomp.Profile) (*OCISeccomp, []string, error) {
	if p.Arch != unix.AUDIT_ARCH_X86_64 || p.Default != seccomp.Allow {
		return nil, nil, fmt.Errorf("peer: only x86_64 default-allow profiles translate")
	}
	out := &OCISeccomp{DefaultAction: "SCMP_ACT_ALLOW", Architectures: []string{"SCMP_ARCH_X86_64"}}
	var notes []string
	for _, r := range p.Rules {
		action, errno, err := ociAction(r.Action)
		if err != nil {
			return nil, nil, fmt.Errorf("peer: rule %q: %w", r.Comment, err)
		}
		names := make([]string, 0, len(r.Syscalls))
		for _, nr := range r.Syscalls {
			name, ok := syscallNames[nr]
			if !ok {
				return nil, nil, fmt.Errorf("peer: rule %q: syscall %d has no name here (add it to syscallNames)", r.Comment, nr)
			}
			names = append(names, name)
		}
		rule := OCISyscallRule{Names: names, Action: action, ErrnoRet: errno}
		switch {
		case r.Arg == nil:
			out.Syscalls = append(out.Syscalls, rule)
		case r.Arg.Op == seccomp.MaskedAny:
			for m := r.Arg.Mask; m != 0; m &= m - 1 {
				bit := uint64(1) << bits.TrailingZeros32(m)
				rr := rule
				rr.Args = []OCISeccArg{{Index: uint(r.Arg.Index), Value: bit, ValueTwo: bit, Op: "SCMP_CMP_MASKED_EQ"}}
				out.Syscalls = append(out.Syscalls, rr)
			}
		default:
			notes = append(notes, fmt.Sprintf("%v: argument condition not expressible in the OCI profile, left out (%s)", names, r.Comment))
		}
	}
	return out, notes, nil
}

func ociAction(a seccomp.Action) (string, *uint, error) {
	switch v := uint32(a); {
	case a == seccomp.Allow:
		return "SCMP_ACT_ALLOW", nil, nil
	case a == seccomp.KillProcess:
		return "SCMP_ACT_KILL_PROCESS", nil, nil
	case v&unix.SECCOMP_RET_ACTION_FULL == unix.SECCOMP_RET_ERRNO:
		e := uint(v & unix.SECCOMP_RET_DATA)
		return "SCMP_ACT_ERRNO", &e, nil
	}
	return "", nil, fmt.Errorf("action %v has no OCI form here", a)
}
