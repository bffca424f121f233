package seccomp

import (
	"fmt"
	"math"

	"golang.org/x/sys/unix"
)

// label names an instruction position that may not be emitted yet.
type label int

// next as a jump target means "fall through to the next instruction".
const next label = -1

// assembler builds a classic BPF program with symbolic forward jumps.
type assembler struct {
	prog   []unix.SockFilter
	pos    []int // label -> pc, -1 until bound
	fixups []fixup
}

type fixup struct {
	pc     int
	jt, jf label // conditional jumps
	ja     label // unconditional jump (when jt == jf == next)
}

func (a *assembler) newLabel() label {
	a.pos = append(a.pos, -1)
	return label(len(a.pos) - 1)
}

// bind places l at the next instruction.
func (a *assembler) bind(l label) { a.pos[l] = len(a.prog) }

func (a *assembler) pc() int { return len(a.prog) }

func (a *assembler) stmt(code uint16, k uint32) {
	a.prog = append(a.prog, unix.SockFilter{Code: code, K: k})
}

// jump emits a conditional jump (BPF_JMP|op|BPF_K) comparing A with k.
func (a *assembler) jump(op uint16, k uint32, jt, jf label) {
	a.fixups = append(a.fixups, fixup{pc: a.pc(), jt: jt, jf: jf, ja: next})
	a.stmt(unix.BPF_JMP|op|unix.BPF_K, k)
}

// goTo emits an unconditional jump (32-bit offset).
func (a *assembler) goTo(l label) {
	a.fixups = append(a.fixups, fixup{pc: a.pc(), jt: next, jf: next, ja: l})
	a.stmt(unix.BPF_JMP|unix.BPF_JA, 0)
}

// resolve fills in jump offsets. Classic BPF jumps only forward, and
// conditional ones at most 255 instructions.
func (a *assembler) resolve() ([]unix.SockFilter, error) {
	off := func(pc int, l label) (int, error) {
		if l == next {
			return 0, nil
		}
		target := a.pos[l]
		if target < 0 {
			return 0, fmt.Errorf("seccomp: jump at %d to unbound label %d", pc, l)
		}
		d := target - pc - 1
		if d < 0 {
			return 0, fmt.Errorf("seccomp: backward jump at %d", pc)
		}
		return d, nil
	}
	for _, f := range a.fixups {
		ins := &a.prog[f.pc]
		if f.ja != next {
			d, err := off(f.pc, f.ja)
			if err != nil {
				return nil, err
			}
			if d > math.MaxUint32 {
				return nil, fmt.Errorf("seccomp: jump at %d too far", f.pc)
			}
			ins.K = uint32(d)
			continue
		}
		jt, err := off(f.pc, f.jt)
		if err != nil {
			return nil, err
		}
		jf, err := off(f.pc, f.jf)
		if err != nil {
			return nil, err
		}
		if jt > math.MaxUint8 || jf > math.MaxUint8 {
			return nil, fmt.Errorf("seccomp: conditional jump at %d spans %d/%d instructions, over 255", f.pc, jt, jf)
		}
		ins.Jt, ins.Jf = uint8(jt), uint8(jf)
	}
	return a.prog, nil
}
