package peer

import (
	"fmt"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/seccomp"
)

// maxGap bounds how many allowed values between two refused ones a
// complemented In condition spells out one by one.
const maxGap = 16

// SeccompFrom translates a dsec seccomp profile into the runtime spec's form,
// so a peer container runs under the same filter as a dsec sandbox. dsec's
// profile is ordered (the first matching rule decides) and the spec's is not,
// so a conditional refusal followed by an unconditional allow of the same
// syscall becomes an allow under the complement of the condition: a
// MaskedAny mask becomes "arg & mask == 0", an In list the ranges around its
// values (Docker's form for socket), a NotIn list one rule per value. What
// the spec's form cannot say is left out and returned as a note. libseccomp
// compares all 64 bits of an argument where dsec compares the low 32, which
// differs only for values with high bits set.
func SeccompFrom(p seccomp.Profile) (*OCISeccomp, []string, error) {
	if p.Arch != unix.AUDIT_ARCH_X86_64 {
		return nil, nil, fmt.Errorf("peer: only x86_64 profiles translate")
	}
	def, defErrno, err := ociAction(p.Default)
	if err != nil {
		return nil, nil, fmt.Errorf("peer: default action: %w", err)
	}
	out := &OCISeccomp{DefaultAction: def, DefaultErrnoRet: defErrno, Architectures: []string{"SCMP_ARCH_X86_64"}}
	var notes []string
	pending := map[int]*seccomp.ArgCond{} // conditional refusals waiting for their allow
	decided := map[int]bool{}             // an unconditional rule came first
	for _, r := range p.Rules {
		action, errno, err := ociAction(r.Action)
		if err != nil {
			return nil, nil, fmt.Errorf("peer: rule %q: %w", r.Comment, err)
		}
		plain := OCISyscallRule{Action: action, ErrnoRet: errno}
		for _, nr := range r.Syscalls {
			if decided[nr] {
				continue
			}
			name, ok := seccomp.SyscallName(nr)
			if !ok {
				return nil, nil, fmt.Errorf("peer: rule %q: syscall %d has no x86_64 name", r.Comment, nr)
			}
			switch {
			case r.Arg == nil && pending[nr] != nil && r.Action == seccomp.Allow:
				rules, note := allowUnless(name, *pending[nr])
				out.Syscalls = append(out.Syscalls, rules...)
				if note != "" {
					notes = append(notes, fmt.Sprintf("%s: %s (%s)", name, note, r.Comment))
				}
				decided[nr] = true
			case r.Arg == nil && pending[nr] != nil:
				notes = append(notes, fmt.Sprintf("%s: a conditional refusal before %v not expressible, left out", name, r.Action))
				decided[nr] = true
			case r.Arg == nil:
				plain.Names = append(plain.Names, name)
				decided[nr] = true
			case r.Action == p.Default:
				pending[nr] = r.Arg
			case r.Action == seccomp.Allow && r.Arg.Op == seccomp.In:
				for _, v := range r.Arg.Values {
					out.Syscalls = append(out.Syscalls, allowIf(name, r.Arg.Index, "SCMP_CMP_EQ", uint64(v), 0))
				}
			default:
				notes = append(notes, fmt.Sprintf("%s: argument condition not expressible in the OCI profile, left out (%s)", name, r.Comment))
			}
		}
		if len(plain.Names) > 0 {
			out.Syscalls = append(out.Syscalls, plain)
		}
	}
	return out, notes, nil
}

func allowIf(name string, index int, op string, v, v2 uint64) OCISyscallRule {
	return OCISyscallRule{Names: []string{name}, Action: "SCMP_ACT_ALLOW",
		Args: []OCISeccArg{{Index: uint(index), Value: v, ValueTwo: v2, Op: op}}}
}

// allowUnless are the rules allowing name when c does not hold, and a note
// on what they leave out.
func allowUnless(name string, c seccomp.ArgCond) ([]OCISyscallRule, string) {
	switch c.Op {
	case seccomp.MaskedAny:
		return []OCISyscallRule{allowIf(name, c.Index, "SCMP_CMP_MASKED_EQ", uint64(c.Mask), 0)}, ""
	case seccomp.NotIn:
		var rs []OCISyscallRule
		for _, v := range c.Values {
			rs = append(rs, allowIf(name, c.Index, "SCMP_CMP_EQ", uint64(v), 0))
		}
		return rs, ""
	case seccomp.In:
		vs := slices.Clone(c.Values)
		slices.Sort(vs)
		vs = slices.Compact(vs)
		rs := []OCISyscallRule{allowIf(name, c.Index, "SCMP_CMP_LT", uint64(vs[0]), 0)}
		note := ""
		for i := 0; i+1 < len(vs); i++ {
			if vs[i+1]-vs[i]-1 > maxGap {
				note = fmt.Sprintf("values between %d and %d left refused", vs[i], vs[i+1])
				continue
			}
			for v := vs[i] + 1; v < vs[i+1]; v++ {
				rs = append(rs, allowIf(name, c.Index, "SCMP_CMP_EQ", uint64(v), 0))
			}
		}
		return append(rs, allowIf(name, c.Index, "SCMP_CMP_GT", uint64(vs[len(vs)-1]), 0)), note
	}
	return nil, fmt.Sprintf("condition %d not expressible, left refused", c.Op)
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
