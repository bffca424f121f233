package cgroups

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// Access and type bits of struct bpf_cgroup_dev_ctx.access_type
// (include/uapi/linux/bpf.h): the type in the low 16 bits, the access in
// the high 16.
const (
	bpfDevBlock = 1
	bpfDevChar  = 2
	bpfAccMknod = 1
	bpfAccRead  = 2
	bpfAccWrite = 4
)

// deviceProgram assembles a BPF_PROG_TYPE_CGROUP_DEVICE program that
// returns 1 (allow) when a rule of p matches the access and 0 otherwise,
// like runc's device filter.
func deviceProgram(p DevicePolicy) asm.Instructions {
	insns := asm.Instructions{
		// R2 = type, R3 = access, R4 = major, R5 = minor
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word),
		asm.And.Imm(asm.R2, 0xffff),
		asm.LoadMem(asm.R3, asm.R1, 0, asm.Word),
		asm.RSh.Imm(asm.R3, 16),
		asm.LoadMem(asm.R4, asm.R1, 4, asm.Word),
		asm.LoadMem(asm.R5, asm.R1, 8, asm.Word),
	}
	for i, r := range p.Allow {
		next := fmt.Sprintf("rule%d", i+1)
		var block asm.Instructions
		switch r.Type {
		case 'c':
			block = append(block, asm.JNE.Imm(asm.R2, bpfDevChar, next))
		case 'b':
			block = append(block, asm.JNE.Imm(asm.R2, bpfDevBlock, next))
		}
		if acc := accessBits(r.Access); acc != bpfAccMknod|bpfAccRead|bpfAccWrite {
			// the requested access must be a subset of the rule's
			block = append(block,
				asm.Mov.Reg32(asm.R1, asm.R3),
				asm.And.Imm32(asm.R1, int32(acc)),
				asm.JNE.Reg(asm.R1, asm.R3, next))
		}
		if r.Major >= 0 {
			block = append(block, asm.JNE.Imm(asm.R4, int32(uint32(r.Major)), next))
		}
		if r.Minor >= 0 {
			block = append(block, asm.JNE.Imm(asm.R5, int32(uint32(r.Minor)), next))
		}
		block = append(block, asm.Mov.Imm(asm.R0, 1), asm.Return())
		block[0] = block[0].WithSymbol(fmt.Sprintf("rule%d", i))
		insns = append(insns, block...)
	}
	deny := asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}
	deny[0] = deny[0].WithSymbol(fmt.Sprintf("rule%d", len(p.Allow)))
	return append(insns, deny...)
}

func accessBits(s string) int {
	var a int
	for _, c := range s {
		switch c {
		case 'r':
			a |= bpfAccRead
		case 'w':
			a |= bpfAccWrite
		case 'm':
			a |= bpfAccMknod
		}
	}
	return a
}

// devicePrograms caches one loaded program per distinct policy: every
// sandbox of a node shares it (an attachment holds its own reference, so
// sandboxes outlive the agent process).
type devicePrograms struct {
	mu    sync.Mutex
	progs map[string]*ebpf.Program
}

func (d *devicePrograms) get(p DevicePolicy) (*ebpf.Program, error) {
	var key strings.Builder
	for _, r := range p.Allow {
		key.WriteString(r.String())
		key.WriteByte('\n')
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if prog, ok := d.progs[key.String()]; ok {
		return prog, nil
	}
	spec := &ebpf.ProgramSpec{
		Type:         ebpf.CGroupDevice,
		AttachType:   ebpf.AttachCGroupDevice,
		Instructions: deviceProgram(p),
		License:      "Apache-2.0",
	}
	prog, err := ebpf.NewProgram(spec)
	if errors.Is(err, unix.EPERM) {
		// kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK
		if rerr := rlimit.RemoveMemlock(); rerr == nil {
			prog, err = ebpf.NewProgram(spec)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("load device program: %w", err)
	}
	if d.progs == nil {
		d.progs = map[string]*ebpf.Program{}
	}
	d.progs[key.String()] = prog
	return prog, nil
}

func (d *devicePrograms) close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for k, p := range d.progs {
		errs = append(errs, p.Close())
		delete(d.progs, k)
	}
	return errors.Join(errs...)
}

// attachDevices attaches p's program to the v2 cgroup at dir. BPF_F_ALLOW_MULTI
// lets an operator stack programs of their own; every one must allow.
func (h *Hierarchy) attachDevices(p DevicePolicy, dir string) error {
	prog, err := h.devprogs.get(p)
	if err != nil {
		return err
	}
	fd, err := openRetry(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := link.RawAttachProgram(link.RawAttachProgramOptions{
		Target: fd, Program: prog, Attach: ebpf.AttachCGroupDevice, Flags: unix.BPF_F_ALLOW_MULTI,
	}); err != nil {
		return fmt.Errorf("attach device program to %s: %w", dir, err)
	}
	return nil
}
