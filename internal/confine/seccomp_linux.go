package confine

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// ErrNoNewPrivs says InstallThread was called on a thread without
// no_new_privs; call SetNoNewPrivs on the same thread first.
var ErrNoNewPrivs = errors.New("no_new_privs is not set on this thread")

// action is a seccomp return value.
type action uint32

const (
	actAllow       = action(unix.SECCOMP_RET_ALLOW)
	actKillProcess = action(unix.SECCOMP_RET_KILL_PROCESS)
	actEPERM       = action(unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM))
	actENOSYS      = action(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS))
)

// errnoAction makes a call fail with e.
func errnoAction(e unix.Errno) action {
	return action(unix.SECCOMP_RET_ERRNO | uint32(e)&unix.SECCOMP_RET_DATA)
}

// profile says what a filter does with each system call, by name. A call in
// none of the lists fails with EPERM.
type profile struct {
	allow []string
	deny  []string // EPERM, named on purpose
	errno map[string]unix.Errno
	args  map[string]argRule
}

// argRule decides on a call by its arguments: the first case whose
// conditions all hold gives the action, otherwise def does.
type argRule struct {
	cases []argCase
	def   action
}

type argCase struct {
	when   []argCond
	action action
}

// cmpOp is how an argCond compares.
type cmpOp int

const (
	opEqual   cmpOp = iota // the masked argument equals one of values
	opAnyBits              // the argument has any bit of values[0] set
)

// argCond tests the low 32 bits of one argument. Every argument the rules
// look at is an int or unsigned int in the kernel, which ignores the high
// bits, so a filter must ignore them too.
type argCond struct {
	arg    int    // 0 to 5
	mask   uint32 // applied before opEqual; 0 means none
	op     cmpOp
	values []uint32
}

// archInfo describes an architecture for the generator.
type archInfo struct {
	name  string
	audit uint32 // AUDIT_ARCH_* value in seccomp_data.arch
	// x32 says syscall numbers at or above x32Bit are the x32 ABI, which
	// gets ENOSYS.
	x32 bool
	nr  map[string]uint32
	// absent lists profile names that have no system call here.
	absent []string
}

const x32Bit = 0x40000000

// Offsets into struct seccomp_data. Both supported architectures are little
// endian, so an argument's low 32 bits come first.
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// Workload returns the seccomp filter for workload commands: an allowlist in
// the manner of Docker's default profile. Unknown calls fail with EPERM;
// ptrace, mount, bpf, keyctl, io_uring, unshare and their kind are denied;
// clone may not make namespaces; clone3 fails with ENOSYS so that libc falls
// back to clone; ioctl TIOCSTI/TIOCLINUX, packet, raw, vsock and audit
// sockets, and unusual personalities are denied. A call from a foreign
// architecture kills the process, and x32 calls fail with ENOSYS.
func Workload() (*Filter, error) { return workloadFilter() }

var workloadFilter = sync.OnceValues(func() (*Filter, error) {
	if native == nil {
		return nil, fmt.Errorf("build seccomp filter: no syscall table for this architecture: %w", sandbox.ErrUnsupported)
	}
	return build(native, workload)
})

// WorkloadWithClone3 is Workload with clone3 allowed. The agent needs it
// on cgroup v2, where a command is cloned straight into its cgroup
// (CLONE_INTO_CGROUP exists only in clone3, and the agent forks from the
// filtered thread). clone3's flags cannot be checked, so the caller must
// forbid new user namespaces another way first: the sandbox's user
// namespace has user.max_user_namespaces set to 0; the other namespace
// kinds need capabilities a command never has.
func WorkloadWithClone3() (*Filter, error) { return workloadClone3Filter() }

var workloadClone3Filter = sync.OnceValues(func() (*Filter, error) {
	if native == nil {
		return nil, fmt.Errorf("build seccomp filter: no syscall table for this architecture: %w", sandbox.ErrUnsupported)
	}
	p := workload
	p.errno = map[string]unix.Errno{}
	for k, v := range workload.errno {
		if k != "clone3" {
			p.errno[k] = v
		}
	}
	p.allow = append(append([]string(nil), workload.allow...), "clone3")
	return build(native, p)
})

// leaf is what the filter does with one syscall number.
type leaf struct {
	act  action
	rule *argRule // when set, act is unused
}

// span is a run of syscall numbers, from lo up to the next span's lo, that
// share one leaf.
type span struct {
	lo uint32
	leaf
}

// build compiles p for arch.
func build(arch *archInfo, p profile) (*Filter, error) {
	leaves := map[uint32]leaf{}
	absent := map[string]bool{}
	for _, n := range arch.absent {
		absent[n] = true
	}
	set := func(name string, l leaf) error {
		nr, ok := arch.nr[name]
		if !ok {
			if absent[name] {
				return nil
			}
			return fmt.Errorf("build seccomp filter: unknown system call %q on %s", name, arch.name)
		}
		if _, dup := leaves[nr]; dup {
			return fmt.Errorf("build seccomp filter: system call %q is listed twice", name)
		}
		leaves[nr] = l
		return nil
	}
	for _, n := range p.allow {
		if err := set(n, leaf{act: actAllow}); err != nil {
			return nil, err
		}
	}
	for _, n := range p.deny {
		if err := set(n, leaf{act: actEPERM}); err != nil {
			return nil, err
		}
	}
	for n, e := range p.errno {
		if err := set(n, leaf{act: errnoAction(e)}); err != nil {
			return nil, err
		}
	}
	for n, r := range p.args {
		if err := set(n, leaf{rule: &r}); err != nil {
			return nil, err
		}
	}

	tree, err := emitTree(spans(leaves, actEPERM))
	if err != nil {
		return nil, err
	}
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: arch.audit, SkipTrue: 1},
		bpf.RetConstant{Val: uint32(actKillProcess)},
		bpf.LoadAbsolute{Off: offNr, Size: 4},
	}
	if arch.x32 {
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32Bit, SkipFalse: 1},
			bpf.RetConstant{Val: uint32(actENOSYS)},
		)
	}
	prog = append(prog, tree...)
	if len(prog) > bpfMaxInsns {
		return nil, fmt.Errorf("build seccomp filter: %d instructions, the kernel takes at most %d", len(prog), bpfMaxInsns)
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("build seccomp filter: %w", err)
	}
	return &Filter{insns: prog, raw: raw}, nil
}

// bpfMaxInsns is the kernel's BPF_MAXINSNS.
const bpfMaxInsns = 4096

// spans turns per-number leaves into sorted spans covering every uint32,
// merging neighbours that act alike; numbers without a leaf get def.
func spans(leaves map[uint32]leaf, def action) []span {
	nrs := make([]uint32, 0, len(leaves))
	for nr := range leaves {
		nrs = append(nrs, nr)
	}
	slices.Sort(nrs)
	var out []span
	add := func(lo uint32, l leaf) {
		if n := len(out); n > 0 && out[n-1].rule == nil && l.rule == nil && out[n-1].act == l.act {
			return // same as the span before: extend it
		}
		out = append(out, span{lo: lo, leaf: l})
	}
	next := uint32(0) // the lowest number not yet covered
	for _, nr := range nrs {
		if nr > next {
			add(next, leaf{act: def})
		}
		add(nr, leaves[nr])
		next = nr + 1
	}
	if len(nrs) == 0 || next != 0 { // next wraps to 0 only after 0xffffffff
		add(next, leaf{act: def})
	}
	return out
}

// emitTree emits a binary search over spans, with the syscall number in A.
// Each node tests "nr >= lo of the middle span"; the lower half follows it,
// the upper half comes after the lower half. Conditional jumps reach at most
// 255 instructions, so a longer lower half is jumped over with a JA.
func emitTree(s []span) ([]bpf.Instruction, error) {
	if len(s) == 1 {
		return emitLeaf(s[0].leaf)
	}
	mid := len(s) / 2
	lower, err := emitTree(s[:mid])
	if err != nil {
		return nil, err
	}
	upper, err := emitTree(s[mid:])
	if err != nil {
		return nil, err
	}
	var out []bpf.Instruction
	if len(lower) <= 255 {
		out = append(out, bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: s[mid].lo, SkipTrue: uint8(len(lower))})
	} else {
		out = append(out,
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: s[mid].lo, SkipFalse: 1},
			bpf.Jump{Skip: uint32(len(lower))},
		)
	}
	out = append(out, lower...)
	return append(out, upper...), nil
}

// emitLeaf emits the code that returns l's action.
func emitLeaf(l leaf) ([]bpf.Instruction, error) {
	if l.rule == nil {
		return []bpf.Instruction{bpf.RetConstant{Val: uint32(l.act)}}, nil
	}
	var out []bpf.Instruction
	for _, c := range l.rule.cases {
		block, err := emitCase(c)
		if err != nil {
			return nil, err
		}
		out = append(out, block...)
	}
	return append(out, bpf.RetConstant{Val: uint32(l.rule.def)}), nil
}

// emitCase emits one argCase: each condition either falls through to the
// next or jumps past the case's final return, to the next case.
func emitCase(c argCase) ([]bpf.Instruction, error) {
	// Emit each condition with its "fail" jumps noted, then point them past
	// the return once the case's length is known.
	var out []bpf.Instruction
	var fails []int // indexes of JumpIfs whose false branch fails the case
	for _, cond := range c.when {
		if cond.arg < 0 || cond.arg > 5 || len(cond.values) == 0 {
			return nil, fmt.Errorf("build seccomp filter: bad argument condition %+v", cond)
		}
		out = append(out, bpf.LoadAbsolute{Off: uint32(offArgs + 8*cond.arg), Size: 4})
		switch cond.op {
		case opAnyBits:
			fails = append(fails, len(out))
			out = append(out, bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: cond.values[0]})
		case opEqual:
			if cond.mask != 0 {
				out = append(out, bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: cond.mask})
			}
			n := len(cond.values)
			for i, v := range cond.values {
				if i < n-1 { // match: skip the remaining tests
					out = append(out, bpf.JumpIf{Cond: bpf.JumpEqual, Val: v, SkipTrue: uint8(n - 1 - i)})
					continue
				}
				fails = append(fails, len(out))
				out = append(out, bpf.JumpIf{Cond: bpf.JumpEqual, Val: v})
			}
		default:
			return nil, fmt.Errorf("build seccomp filter: unknown comparison %d", cond.op)
		}
	}
	out = append(out, bpf.RetConstant{Val: uint32(c.action)})
	for _, at := range fails {
		skip := len(out) - 1 - at // to the instruction after the return
		if skip > 255 {
			return nil, errors.New("build seccomp filter: argument rule too long")
		}
		j := out[at].(bpf.JumpIf)
		j.SkipFalse = uint8(skip)
		out[at] = j
	}
	return out, nil
}

// InstallThread loads f on the calling thread only: seccomp(2) with
// SECCOMP_SET_MODE_FILTER and no flags (not TSYNC), so the process's other
// threads stay unfiltered. The calling goroutine must be locked to its
// thread (runtime.LockOSThread) and stay locked, and no_new_privs must
// already be set on the thread (SetNoNewPrivs); otherwise InstallThread
// returns an error wrapping ErrNoNewPrivs and installs nothing. Children
// forked from the thread afterwards inherit the filter.
func (f *Filter) InstallThread() error {
	nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	if err != nil {
		return fmt.Errorf("install seccomp filter: read no_new_privs: %w", err)
	}
	if nnp != 1 {
		return fmt.Errorf("install seccomp filter: %w; call SetNoNewPrivs on this thread first", ErrNoNewPrivs)
	}
	if err := seccompSetFilter(f.raw); err != nil {
		return fmt.Errorf("install seccomp filter: %w", err)
	}
	return nil
}

// Supported reports whether this kernel and architecture can run the
// filter: seccomp filter mode, and the return actions it uses. The error
// wraps sandbox.ErrUnsupported.
func Supported() error {
	if native == nil {
		return fmt.Errorf("seccomp: no syscall table for this architecture: %w", sandbox.ErrUnsupported)
	}
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: kernel has no seccomp support (CONFIG_SECCOMP): %w: %w", err, sandbox.ErrUnsupported)
	}
	for _, a := range []action{actAllow, actEPERM, actKillProcess} {
		if err := seccompActionAvail(uint32(a) & unix.SECCOMP_RET_ACTION_FULL); err != nil {
			return fmt.Errorf("seccomp: kernel lacks filter action %#x (needs Linux 4.14+ with CONFIG_SECCOMP_FILTER): %w: %w", uint32(a), err, sandbox.ErrUnsupported)
		}
	}
	return nil
}
