package confine

import (
	"slices"

	"golang.org/x/net/bpf"
)

// Filter is a seccomp-bpf program for the architecture the binary was built
// for. Make one with Workload; a Filter never changes once made.
type Filter struct {
	insns []bpf.Instruction
	raw   []bpf.RawInstruction
}

// Instructions returns the program as x/net/bpf instructions, for
// inspection or for running it in bpf.NewVM.
func (f *Filter) Instructions() []bpf.Instruction { return slices.Clone(f.insns) }

// Program returns the assembled program; each RawInstruction has the layout
// of the kernel's struct sock_filter.
func (f *Filter) Program() []bpf.RawInstruction { return slices.Clone(f.raw) }
