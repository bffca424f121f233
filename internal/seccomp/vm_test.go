package seccomp

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// seccompData mirrors struct seccomp_data.
type seccompData struct {
	Nr   int32
	Arch uint32
	IP   uint64
	Args [6]uint64
}

func (d seccompData) bytes() []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(d.Nr))
	b = binary.LittleEndian.AppendUint32(b, d.Arch)
	b = binary.LittleEndian.AppendUint64(b, d.IP)
	for _, a := range d.Args {
		b = binary.LittleEndian.AppendUint64(b, a)
	}
	return b
}

// run evaluates a seccomp program the way the kernel does, for the opcodes
// the compiler emits, rejecting anything else or any malformed jump.
func run(prog []unix.SockFilter, d seccompData) (Action, error) {
	act, _, err := runSteps(prog, d)
	return act, err
}

// runSteps is run that also counts the instructions executed.
func runSteps(prog []unix.SockFilter, d seccompData) (Action, int, error) {
	data := d.bytes()
	var acc uint32
	steps := 0
	for pc := 0; pc < len(prog); pc++ {
		steps++
		ins := prog[pc]
		cond := func(ok bool) {
			if ok {
				pc += int(ins.Jt)
			} else {
				pc += int(ins.Jf)
			}
		}
		switch ins.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			if ins.K%4 != 0 || int(ins.K)+4 > len(data) {
				return 0, steps, fmt.Errorf("pc %d: bad load offset %d", pc, ins.K)
			}
			acc = binary.LittleEndian.Uint32(data[ins.K:])
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
			cond(acc == ins.K)
		case unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			cond(acc&ins.K != 0)
		case unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K:
			cond(acc > ins.K)
		case unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K:
			cond(acc >= ins.K)
		case unix.BPF_JMP | unix.BPF_JA:
			pc += int(ins.K)
		case unix.BPF_RET | unix.BPF_K:
			return Action(ins.K), steps, nil
		default:
			return 0, steps, fmt.Errorf("pc %d: unsupported opcode %#x", pc, ins.Code)
		}
		if pc+1 > len(prog) {
			return 0, steps, fmt.Errorf("pc %d: jump past the end", pc)
		}
	}
	return 0, steps, fmt.Errorf("fell off the end of the program")
}
