package seccomp

import (
	"errors"
	"fmt"
	"math"
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

// Compile translates p into a classic BPF seccomp program.
//
// Layout: check the architecture (else BadArch), load the syscall number,
// refuse x32 numbers, then a binary search on the number over segments:
// runs of consecutive numbers with one action and no argument condition
// (an allow list's allowed numbers and the gaps between them), each leaf a
// return instruction, and single numbers with an argument condition, whose
// leaf jumps to a block testing the number's rules in order ("jeq nr",
// the condition inline, reloading the number) and ending with Default.
// Return blocks for those are emitted every chunkSize instructions so every
// conditional jump fits in 8 bits; a search node whose left half is too far
// for one jumps through an unconditional jump.
//
// The search keeps the work per system call small, and above all the work
// of installing the filter: the kernel emulates the program once for every
// syscall number when it is attached (seccomp_cache_prepare, with
// interrupts off), so a single linear chain of 80 tests cost 150 µs per
// install, once per FnCall run and per sandbox. Searching runs rather than
// numbers keeps an allow list of 300 syscalls smaller (about 200
// instructions) than a chain of its numbers would be.
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
	segs := segments(p)
	for i := range segs {
		if segs[i].entries != nil {
			segs[i].label = a.newLabel()
		}
	}
	c.search(segs)
	c.chunkStart = a.pc()
	for _, s := range segs {
		if s.entries == nil {
			continue
		}
		a.bind(s.label)
		for _, e := range s.entries {
			c.entry(e.rule, e.nr)
		}
		if a.pc()-c.chunkStart+1 > chunkSize {
			c.flush(true)
		}
		a.stmt(unix.BPF_RET|unix.BPF_K, uint32(p.Default))
	}
	c.flush(false)

	prog, err := a.resolve()
	if err != nil {
		return nil, err
	}
	if len(prog) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("seccomp: program has %d instructions, over the kernel's %d", len(prog), unix.BPF_MAXINSNS)
	}
	return prog, nil
}

// entry is one (rule, syscall number) test.
type entry struct {
	rule Rule
	nr   int
}

// segment is the syscall numbers from lo up to the next segment's lo: all
// decided by act, or (entries set) one number with an argument condition,
// whose rules are tested in order.
type segment struct {
	lo      int
	act     Action
	entries []entry
	label   label // the entries' block
}

// segments splits the syscall numbers [0, 2^32) into the segments of p, in
// order. A number's entries keep their rule order, so the first matching
// rule still decides; those after its first rule without a condition are
// dropped (they cannot match).
func segments(p Profile) []segment {
	byNr := map[int][]entry{}
	var nrs []int
	for _, r := range p.Rules {
		for _, nr := range r.Syscalls {
			if _, ok := byNr[nr]; !ok {
				nrs = append(nrs, nr)
			}
			byNr[nr] = append(byNr[nr], entry{rule: r, nr: nr})
		}
	}
	sort.Ints(nrs)
	var segs []segment
	add := func(s segment) {
		if n := len(segs); n > 0 && segs[n-1].lo == s.lo {
			segs = segs[:n-1] // an empty gap
		}
		if n := len(segs); n > 0 && s.entries == nil && segs[n-1].entries == nil && segs[n-1].act == s.act {
			return
		}
		segs = append(segs, s)
	}
	add(segment{lo: 0, act: p.Default})
	for _, nr := range nrs {
		es := byNr[nr]
		for i, e := range es {
			if e.rule.Arg == nil {
				es = es[:i+1]
				break
			}
		}
		if es[0].rule.Arg == nil {
			add(segment{lo: nr, act: es[0].rule.Action})
		} else {
			add(segment{lo: nr, entries: es})
		}
		add(segment{lo: nr + 1, act: p.Default})
	}
	return segs
}

// search emits the binary search over segs: each inner node is one "jge"
// whose false branch falls through to its left half; each leaf returns its
// segment's action or jumps (32-bit offset) to its entries' block.
func (c *compiler) search(segs []segment) {
	a := &c.asm
	if len(segs) == 1 {
		if s := segs[0]; s.entries == nil {
			a.stmt(unix.BPF_RET|unix.BPF_K, uint32(s.act))
		} else {
			a.goTo(s.label)
		}
		return
	}
	mid := len(segs) / 2
	right := a.newLabel()
	if searchSize(segs[:mid]) <= math.MaxUint8 {
		a.jump(unix.BPF_JGE, uint32(segs[mid].lo), right, next)
	} else {
		left := a.newLabel()
		a.jump(unix.BPF_JGE, uint32(segs[mid].lo), next, left)
		a.goTo(right)
		a.bind(left)
	}
	c.search(segs[:mid])
	a.bind(right)
	c.search(segs[mid:])
}

// searchSize is how many instructions search emits for segs.
func searchSize(segs []segment) int {
	if len(segs) == 1 {
		return 1
	}
	mid := len(segs) / 2
	left := searchSize(segs[:mid])
	n := 1 + left + searchSize(segs[mid:])
	if left > math.MaxUint8 {
		n++
	}
	return n
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
