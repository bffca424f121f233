package seccomp

import (
	"errors"
	"fmt"
	"sort"

	"golang.org/x/sys/unix"
)

// Offsets in struct seccomp_data (little endian: an argument's low half
// comes first).
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// x32Bit marks x32 ABI syscall numbers on x86_64 (__X32_SYSCALL_BIT).
const x32Bit = 0x40000000

// chunkSize bounds the code between two return blocks. A jump to a return
// instruction spans at most the chunk, the jump over the block and the block
// itself (at most one return per jump in the chunk): 2*120+1 <= 255.
const chunkSize = 120

// maxValues bounds NotIn and In so one condition block fits in a chunk.
const maxValues = 64

// bucketSize is how many distinct syscall numbers share one linear chain of
// "jeq nr" tests (see Compile).
const bucketSize = 8

// Compile translates p into a classic BPF seccomp program.
//
// Layout: check the architecture (else BadArch), load the syscall number,
// refuse x32 numbers, then a binary search on the number over buckets of
// bucketSize consecutive listed syscall numbers, each bucket a chain of "jeq
// nr" tests (in rule order) jumping to a shared return instruction per
// action and ending with Default; rules with an argument condition test it
// inline and reload the number. Return blocks are emitted every chunkSize
// instructions so every conditional jump fits in 8 bits.
//
// The search keeps the work per system call small, and above all the work
// of installing the filter: the kernel emulates the program once for every
// syscall number when it is attached (seccomp_cache_prepare, with
// interrupts off), so a single linear chain of 80 tests cost 150 µs per
// install, once per FnCall run and per sandbox, against ~25 µs for this
// layout.
func (p Profile) Compile() ([]unix.SockFilter, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	c := compiler{rets: map[Action]label{}}
	a := &c.asm

	a.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArch)
	a.jump(unix.BPF_JEQ, p.Arch, next, c.ret(p.BadArch))
	a.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offNr)
	if p.Arch == unix.AUDIT_ARCH_X86_64 {
		a.jump(unix.BPF_JSET, x32Bit, c.ret(p.X32), next)
	}
	// the header's returns before the search, within reach of its jumps
	c.flush(true)
	buckets := bucketize(p.Rules)
	labels := make([]label, len(buckets))
	for i := range labels {
		labels[i] = a.newLabel()
	}
	c.dispatch(buckets, labels)
	for i, b := range buckets {
		a.bind(labels[i])
		for _, e := range b.entries {
			c.entry(e.rule, e.nr)
		}
		if a.pc()-c.chunkStart+1 > chunkSize {
			c.flush(true)
		}
		a.stmt(unix.BPF_RET|unix.BPF_K, uint32(p.Default))
	}
	c.flush(false)
	if len(buckets) == 0 {
		a.stmt(unix.BPF_RET|unix.BPF_K, uint32(p.Default))
		c.flush(false)
	}

	prog, err := a.resolve()
	if err != nil {
		return nil, err
	}
	if len(prog) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("seccomp: program has %d instructions, over the kernel's %d", len(prog), unix.BPF_MAXINSNS)
	}
	return prog, nil
}

// entry is one (rule, syscall number) test; bucket holds the entries whose
// numbers fall in [lo, next bucket's lo), in rule order.
type entry struct {
	rule Rule
	nr   int
}

type bucket struct {
	lo      int
	entries []entry
}

// bucketize splits the rules' syscall numbers into buckets of bucketSize
// consecutive distinct numbers. A number's entries keep their rule order, so
// the first matching rule still decides.
func bucketize(rules []Rule) []bucket {
	seen := map[int]bool{}
	var nrs []int
	for _, r := range rules {
		for _, nr := range r.Syscalls {
			if !seen[nr] {
				seen[nr] = true
				nrs = append(nrs, nr)
			}
		}
	}
	sort.Ints(nrs)
	idx := map[int]int{} // nr -> bucket
	var bs []bucket
	for i, nr := range nrs {
		if i%bucketSize == 0 {
			bs = append(bs, bucket{lo: nr})
		}
		idx[nr] = len(bs) - 1
	}
	for _, r := range rules {
		for _, nr := range r.Syscalls {
			b := &bs[idx[nr]]
			b.entries = append(b.entries, entry{rule: r, nr: nr})
		}
	}
	if len(bs) > 0 {
		bs[0].lo = 0 // the first bucket also takes every smaller number
	}
	return bs
}

// dispatch emits the binary search: each leaf jumps (32-bit offset) to its
// bucket; each inner node is one "jge" whose false branch falls through to
// its left half, so every conditional jump spans at most one subtree.
func (c *compiler) dispatch(bs []bucket, labels []label) {
	a := &c.asm
	if len(bs) == 0 {
		return
	}
	if len(bs) == 1 {
		a.goTo(labels[0])
		return
	}
	mid := len(bs) / 2
	right := a.newLabel()
	a.jump(unix.BPF_JGE, uint32(bs[mid].lo), right, next)
	c.dispatch(bs[:mid], labels[:mid])
	a.bind(right)
	c.dispatch(bs[mid:], labels[mid:])
}

type compiler struct {
	asm        assembler
	rets       map[Action]label // return instructions pending in this chunk
	order      []Action         // rets' keys in first-use order
	chunkStart int
}

// ret is the label of this chunk's "ret act" instruction.
func (c *compiler) ret(act Action) label {
	l, ok := c.rets[act]
	if !ok {
		l = c.asm.newLabel()
		c.rets[act] = l
		c.order = append(c.order, act)
	}
	return l
}

// flush emits the pending return instructions, jumping over them first
// when more code follows.
func (c *compiler) flush(more bool) {
	a := &c.asm
	var cont label
	if more {
		cont = a.newLabel()
		a.goTo(cont)
	}
	for _, act := range c.order {
		a.bind(c.rets[act])
		a.stmt(unix.BPF_RET|unix.BPF_K, uint32(act))
	}
	c.rets, c.order = map[Action]label{}, nil
	if more {
		a.bind(cont)
	}
	c.chunkStart = a.pc()
}

// entry emits the test of rule r for syscall nr; the accumulator holds the
// syscall number before and after.
func (c *compiler) entry(r Rule, nr int) {
	a := &c.asm
	size := 1 // instructions for this entry
	if r.Arg != nil {
		size = 4
		if r.Arg.Op == NotIn || r.Arg.Op == In {
			size += len(r.Arg.Values)
		}
	}
	if a.pc()-c.chunkStart+size > chunkSize {
		c.flush(true)
	}
	if r.Arg == nil {
		a.jump(unix.BPF_JEQ, uint32(nr), c.ret(r.Action), next)
		return
	}
	skip, reload := a.newLabel(), a.newLabel()
	a.jump(unix.BPF_JEQ, uint32(nr), next, skip)
	a.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, uint32(offArgs+8*r.Arg.Index))
	switch r.Arg.Op {
	case MaskedAny:
		a.jump(unix.BPF_JSET, r.Arg.Mask, c.ret(r.Action), reload)
	case NotIn:
		for _, v := range r.Arg.Values {
			a.jump(unix.BPF_JEQ, v, reload, next)
		}
		a.goTo(c.ret(r.Action))
	case In:
		for _, v := range r.Arg.Values {
			a.jump(unix.BPF_JEQ, v, c.ret(r.Action), next)
		}
	}
	a.bind(reload)
	a.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offNr)
	a.bind(skip)
}

func (p Profile) validate() error {
	var errs []error
	for name, act := range map[string]Action{"BadArch": p.BadArch, "X32": p.X32, "Default": p.Default} {
		if !act.valid() && !(name == "X32" && p.Arch != unix.AUDIT_ARCH_X86_64) {
			errs = append(errs, fmt.Errorf("%s action %#x is not a seccomp return value", name, uint32(act)))
		}
	}
	if p.Arch == 0 {
		errs = append(errs, errors.New("no architecture"))
	}
	for i, r := range p.Rules {
		where := fmt.Sprintf("rule %d (%s)", i, r.Comment)
		if !r.Action.valid() {
			errs = append(errs, fmt.Errorf("%s: action %#x is not a seccomp return value", where, uint32(r.Action)))
		}
		if len(r.Syscalls) == 0 {
			errs = append(errs, fmt.Errorf("%s: no syscalls", where))
		}
		for _, nr := range r.Syscalls {
			if nr < 0 || nr >= x32Bit {
				errs = append(errs, fmt.Errorf("%s: syscall number %d out of range", where, nr))
			}
		}
		if r.Arg == nil {
			continue
		}
		switch {
		case r.Arg.Index < 0 || r.Arg.Index > 5:
			errs = append(errs, fmt.Errorf("%s: argument index %d not in 0..5", where, r.Arg.Index))
		case r.Arg.Op == MaskedAny && r.Arg.Mask == 0:
			errs = append(errs, fmt.Errorf("%s: empty mask", where))
		case (r.Arg.Op == NotIn || r.Arg.Op == In) && len(r.Arg.Values) > maxValues:
			errs = append(errs, fmt.Errorf("%s: more than %d values", where, maxValues))
		case r.Arg.Op == In && len(r.Arg.Values) == 0:
			errs = append(errs, fmt.Errorf("%s: no values", where))
		case r.Arg.Op != MaskedAny && r.Arg.Op != NotIn && r.Arg.Op != In:
			errs = append(errs, fmt.Errorf("%s: unknown condition %d", where, r.Arg.Op))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("seccomp: invalid profile: %w", err)
	}
	return nil
}
