package confine

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// seccompData builds a struct seccomp_data for x/net/bpf's VM. The kernel
// layout is little endian (an argument's low word first), but the VM loads
// words big endian, so each 32-bit word is stored big endian at the offset
// the kernel layout gives it.
func seccompData(arch, nr uint32, args ...uint64) []byte {
	b := make([]byte, 64) // sizeof(struct seccomp_data)
	binary.BigEndian.PutUint32(b[offNr:], nr)
	binary.BigEndian.PutUint32(b[offArch:], arch)
	for i, a := range args {
		binary.BigEndian.PutUint32(b[offArgs+8*i:], uint32(a))
		binary.BigEndian.PutUint32(b[offArgs+8*i+4:], uint32(a>>32))
	}
	return b
}

// run runs f over one call and returns the seccomp action.
func run(t *testing.T, vm *bpf.VM, arch, nr uint32, args ...uint64) action {
	t.Helper()
	got, err := vm.Run(seccompData(arch, nr, args...))
	if err != nil {
		t.Fatalf("run filter: %v", err)
	}
	return action(got)
}

func (a action) String() string {
	switch {
	case a == actAllow:
		return "ALLOW"
	case a == actKillProcess:
		return "KILL_PROCESS"
	case uint32(a)&unix.SECCOMP_RET_ACTION_FULL == unix.SECCOMP_RET_ERRNO:
		return "ERRNO(" + unix.ErrnoName(unix.Errno(uint32(a)&unix.SECCOMP_RET_DATA)) + ")"
	}
	return fmt.Sprintf("%#x", uint32(a))
}

func workloadVM(t *testing.T) (*Filter, *bpf.VM) {
	t.Helper()
	if native == nil {
		t.Skipf("no syscall table for %s", runtime.GOARCH)
	}
	f, err := Workload()
	if err != nil {
		t.Fatalf("Workload: %v", err)
	}
	vm, err := bpf.NewVM(f.Instructions())
	if err != nil {
		t.Fatalf("load filter into the BPF VM: %v", err)
	}
	return f, vm
}

func TestWorkloadFilterActions(t *testing.T) {
	f, vm := workloadVM(t)
	arch := native.audit
	foreign := uint32(unix.AUDIT_ARCH_AARCH64)
	if runtime.GOARCH == "arm64" {
		foreign = unix.AUDIT_ARCH_X86_64
	}
	// x32 numbers exist only on amd64; elsewhere they are unknown numbers.
	x32 := actEPERM
	if runtime.GOARCH == "amd64" {
		x32 = actENOSYS
	}
	const sigchld = uint64(unix.SIGCHLD)
	threadFlags := uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND |
		unix.CLONE_THREAD | unix.CLONE_SYSVSEM | unix.CLONE_SETTLS |
		unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID)

	tests := []struct {
		name string
		arch uint32 // 0: the native one
		nr   uint32
		args []uint64
		want action
	}{
		{name: "read", nr: unix.SYS_READ, want: actAllow},
		{name: "write", nr: unix.SYS_WRITE, want: actAllow},
		{name: "execve", nr: unix.SYS_EXECVE, want: actAllow},
		{name: "openat", nr: unix.SYS_OPENAT, want: actAllow},
		{name: "futex", nr: unix.SYS_FUTEX, want: actAllow},
		{name: "exit_group", nr: unix.SYS_EXIT_GROUP, want: actAllow},
		{name: "rt_sigreturn", nr: unix.SYS_RT_SIGRETURN, want: actAllow},
		{name: "clone fork-like", nr: unix.SYS_CLONE, args: []uint64{sigchld}, want: actAllow},
		{name: "clone thread", nr: unix.SYS_CLONE, args: []uint64{threadFlags}, want: actAllow},
		{name: "clone vfork with pidfd", nr: unix.SYS_CLONE, args: []uint64{unix.CLONE_VFORK | unix.CLONE_VM | unix.CLONE_PIDFD | sigchld}, want: actAllow},
		{name: "clone NEWUSER", nr: unix.SYS_CLONE, args: []uint64{unix.CLONE_NEWUSER | sigchld}, want: actEPERM},
		{name: "clone NEWNS", nr: unix.SYS_CLONE, args: []uint64{unix.CLONE_NEWNS}, want: actEPERM},
		{name: "clone NEWPID", nr: unix.SYS_CLONE, args: []uint64{unix.CLONE_NEWPID | sigchld}, want: actEPERM},
		{name: "clone NEWNET", nr: unix.SYS_CLONE, args: []uint64{unix.CLONE_NEWNET}, want: actEPERM},
		{name: "clone NEWUTS", nr: unix.SYS_CLONE, args: []uint64{unix.CLONE_NEWUTS}, want: actEPERM},
		{name: "clone NEWIPC", nr: unix.SYS_CLONE, args: []uint64{unix.CLONE_NEWIPC}, want: actEPERM},
		{name: "clone NEWCGROUP", nr: unix.SYS_CLONE, args: []uint64{unix.CLONE_NEWCGROUP}, want: actEPERM},
		{name: "clone NEWTIME", nr: unix.SYS_CLONE, args: []uint64{unix.CLONE_NEWTIME}, want: actEPERM},
		{name: "clone thread plus NEWUSER", nr: unix.SYS_CLONE, args: []uint64{threadFlags | unix.CLONE_NEWUSER}, want: actEPERM},
		// The kernel ignores the high half of clone's flags.
		{name: "clone high word ignored", nr: unix.SYS_CLONE, args: []uint64{unix.CLONE_NEWUSER<<32 | sigchld}, want: actAllow},
		{name: "clone3", nr: unix.SYS_CLONE3, want: actENOSYS},
		{name: "ptrace", nr: unix.SYS_PTRACE, args: []uint64{unix.PTRACE_TRACEME}, want: actEPERM},
		{name: "mount", nr: unix.SYS_MOUNT, want: actEPERM},
		{name: "umount2", nr: unix.SYS_UMOUNT2, want: actEPERM},
		{name: "pivot_root", nr: unix.SYS_PIVOT_ROOT, want: actEPERM},
		{name: "bpf", nr: unix.SYS_BPF, want: actEPERM},
		{name: "keyctl", nr: unix.SYS_KEYCTL, want: actEPERM},
		{name: "add_key", nr: unix.SYS_ADD_KEY, want: actEPERM},
		{name: "perf_event_open", nr: unix.SYS_PERF_EVENT_OPEN, want: actEPERM},
		{name: "userfaultfd", nr: unix.SYS_USERFAULTFD, want: actEPERM},
		{name: "io_uring_setup", nr: unix.SYS_IO_URING_SETUP, want: actEPERM},
		{name: "io_setup", nr: unix.SYS_IO_SETUP, args: []uint64{1, 0}, want: actENOSYS},
		{name: "io_submit", nr: unix.SYS_IO_SUBMIT, want: actENOSYS},
		{name: "io_getevents", nr: unix.SYS_IO_GETEVENTS, want: actENOSYS},
		{name: "memfd_secret", nr: unix.SYS_MEMFD_SECRET, want: actENOSYS},
		{name: "memfd_create", nr: unix.SYS_MEMFD_CREATE, want: actAllow},
		{name: "inotify_init1", nr: unix.SYS_INOTIFY_INIT1, want: actAllow},
		{name: "setns", nr: unix.SYS_SETNS, want: actEPERM},
		{name: "unshare no flags", nr: unix.SYS_UNSHARE, args: []uint64{0}, want: actEPERM},
		{name: "unshare NEWUSER", nr: unix.SYS_UNSHARE, args: []uint64{unix.CLONE_NEWUSER}, want: actEPERM},
		{name: "unshare FILES", nr: unix.SYS_UNSHARE, args: []uint64{unix.CLONE_FILES}, want: actEPERM},
		{name: "process_vm_readv", nr: unix.SYS_PROCESS_VM_READV, want: actEPERM},
		{name: "open_by_handle_at", nr: unix.SYS_OPEN_BY_HANDLE_AT, want: actEPERM},
		{name: "kexec_load", nr: unix.SYS_KEXEC_LOAD, want: actEPERM},
		{name: "finit_module", nr: unix.SYS_FINIT_MODULE, want: actEPERM},
		{name: "reboot", nr: unix.SYS_REBOOT, want: actEPERM},
		{name: "clock_settime", nr: unix.SYS_CLOCK_SETTIME, want: actEPERM},
		{name: "fsopen", nr: unix.SYS_FSOPEN, want: actEPERM},
		{name: "ioctl TIOCSTI", nr: unix.SYS_IOCTL, args: []uint64{0, unix.TIOCSTI}, want: actEPERM},
		{name: "ioctl TIOCSTI high word set", nr: unix.SYS_IOCTL, args: []uint64{0, 1<<32 | unix.TIOCSTI}, want: actEPERM},
		{name: "ioctl TIOCLINUX", nr: unix.SYS_IOCTL, args: []uint64{0, unix.TIOCLINUX}, want: actEPERM},
		{name: "ioctl TCGETS", nr: unix.SYS_IOCTL, args: []uint64{0, unix.TCGETS}, want: actAllow},
		{name: "ioctl TIOCGWINSZ", nr: unix.SYS_IOCTL, args: []uint64{3, unix.TIOCGWINSZ}, want: actAllow},
		{name: "socket inet stream", nr: unix.SYS_SOCKET, args: []uint64{unix.AF_INET, unix.SOCK_STREAM, 0}, want: actAllow},
		{name: "socket inet6 dgram nonblock", nr: unix.SYS_SOCKET, args: []uint64{unix.AF_INET6, unix.SOCK_DGRAM | unix.SOCK_NONBLOCK, 0}, want: actAllow},
		{name: "socket inet ping", nr: unix.SYS_SOCKET, args: []uint64{unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_ICMP}, want: actAllow},
		{name: "socket unix", nr: unix.SYS_SOCKET, args: []uint64{unix.AF_UNIX, unix.SOCK_STREAM | unix.SOCK_CLOEXEC, 0}, want: actAllow},
		{name: "socket netlink route", nr: unix.SYS_SOCKET, args: []uint64{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE}, want: actAllow},
		{name: "socket packet", nr: unix.SYS_SOCKET, args: []uint64{unix.AF_PACKET, unix.SOCK_RAW, 0x0300}, want: actEPERM},
		{name: "socket packet dgram", nr: unix.SYS_SOCKET, args: []uint64{unix.AF_PACKET, unix.SOCK_DGRAM, 0}, want: actEPERM},
		{name: "socket inet raw cloexec", nr: unix.SYS_SOCKET, args: []uint64{unix.AF_INET, unix.SOCK_RAW | unix.SOCK_CLOEXEC, unix.IPPROTO_ICMP}, want: actEPERM},
		{name: "socket inet6 raw nonblock", nr: unix.SYS_SOCKET, args: []uint64{unix.AF_INET6, unix.SOCK_RAW | unix.SOCK_NONBLOCK, 0}, want: actEPERM},
		{name: "socket inet SOCK_PACKET", nr: unix.SYS_SOCKET, args: []uint64{unix.AF_INET, unix.SOCK_PACKET, 0}, want: actEPERM},
		{name: "socket vsock", nr: unix.SYS_SOCKET, args: []uint64{unix.AF_VSOCK, unix.SOCK_STREAM, 0}, want: actEPERM},
		{name: "socket netlink audit", nr: unix.SYS_SOCKET, args: []uint64{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT}, want: actEPERM},
		{name: "personality query", nr: unix.SYS_PERSONALITY, args: []uint64{0xffffffff}, want: actAllow},
		{name: "personality linux", nr: unix.SYS_PERSONALITY, args: []uint64{0}, want: actAllow},
		{name: "personality linux32 uname26", nr: unix.SYS_PERSONALITY, args: []uint64{0x20008}, want: actAllow},
		{name: "personality addr_no_randomize", nr: unix.SYS_PERSONALITY, args: []uint64{0x0040000}, want: actEPERM},
		{name: "unknown number 1000", nr: 1000, want: actEPERM},
		{name: "largest 32-bit number below x32", nr: x32Bit - 1, want: actEPERM},
		{name: "x32 read", nr: x32Bit | unix.SYS_READ, want: x32},
		{name: "minus one", nr: 0xffffffff, want: x32},
		{name: "foreign arch read", arch: foreign, nr: unix.SYS_READ, want: actKillProcess},
		{name: "i386 read", arch: unix.AUDIT_ARCH_I386, nr: 3, want: actKillProcess},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := arch
			if tt.arch != 0 {
				a = tt.arch
			}
			if got := run(t, vm, a, tt.nr, tt.args...); got != tt.want {
				t.Errorf("nr %d args %#x: got %v, want %v", tt.nr, tt.args, got, tt.want)
			}
		})
	}
	if n := len(f.Program()); n >= bpfMaxInsns || n != len(f.Instructions()) {
		t.Errorf("program has %d instructions (%d before assembly), want fewer than %d", n, len(f.Instructions()), bpfMaxInsns)
	}
	t.Logf("%s workload filter: %d instructions", native.name, len(f.Program()))
}

// TestWorkloadFilterEveryNumber checks every syscall number up to 1023
// against the profile's intent, so that no range of the search tree is off
// by one.
func TestWorkloadFilterEveryNumber(t *testing.T) {
	_, vm := workloadVM(t)
	want := map[uint32]action{}
	for _, n := range workload.allow {
		if nr, ok := native.nr[n]; ok {
			want[nr] = actAllow
		}
	}
	for _, n := range workload.deny {
		if nr, ok := native.nr[n]; ok {
			want[nr] = actEPERM
		}
	}
	for n, e := range workload.errno {
		want[native.nr[n]] = errnoAction(e)
	}
	args := map[uint32]bool{}
	for n := range workload.args {
		args[native.nr[n]] = true
	}
	allowed := 0
	for nr := uint32(0); nr < 1024; nr++ {
		if args[nr] {
			continue // covered by TestWorkloadFilterActions
		}
		w, ok := want[nr]
		if !ok {
			w = actEPERM
		}
		if got := run(t, vm, native.audit, nr, 0, 0, 0, 0, 0, 0); got != w {
			t.Errorf("syscall %d: got %v, want %v", nr, got, w)
		}
		if w == actAllow {
			allowed++
		}
	}
	if allowed < 250 {
		t.Errorf("only %d syscalls allowed; the profile lost most of its allowlist", allowed)
	}
}

func TestBuildRejectsBadProfiles(t *testing.T) {
	arch := &archInfo{name: "test", audit: 1, nr: map[string]uint32{"a": 1, "b": 2}, absent: []string{"c"}}
	tests := []struct {
		name    string
		p       profile
		wantErr string
	}{
		{name: "unknown name", p: profile{allow: []string{"a", "zzz"}}, wantErr: `unknown system call "zzz"`},
		{name: "allowed and denied", p: profile{allow: []string{"a"}, deny: []string{"a"}}, wantErr: "listed twice"},
		{name: "bad argument index", p: profile{args: map[string]argRule{"a": {cases: []argCase{{when: []argCond{{arg: 6, values: []uint32{1}}}}}}}}, wantErr: "bad argument condition"},
		{name: "absent name is skipped", p: profile{allow: []string{"a", "c"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := build(arch, tt.p)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("build: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("build: got error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestBuildLongJumps builds a tree too big for 8-bit conditional jumps, so
// that the generator must jump over lower halves with JA, and checks every
// number.
func TestBuildLongJumps(t *testing.T) {
	const n = 1200
	arch := &archInfo{name: "test", audit: 7, nr: map[string]uint32{}}
	var p profile
	for nr := uint32(0); nr < n; nr += 2 { // every even number allowed
		name := fmt.Sprint("sys", nr)
		arch.nr[name] = nr
		p.allow = append(p.allow, name)
	}
	arch.nr["clone"] = n + 1
	p.args = map[string]argRule{"clone": workload.args["clone"]}
	f, err := build(arch, p)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	longJumps := 0
	for _, ins := range f.Instructions() {
		if _, ok := ins.(bpf.Jump); ok {
			longJumps++
		}
	}
	if longJumps == 0 {
		t.Fatalf("the %d-instruction program has no JA; the test no longer covers long jumps", len(f.Instructions()))
	}
	vm, err := bpf.NewVM(f.Instructions())
	if err != nil {
		t.Fatalf("load filter into the BPF VM: %v", err)
	}
	for nr := uint32(0); nr < n+10; nr++ {
		want := actEPERM
		if nr < n && nr%2 == 0 {
			want = actAllow
		}
		if nr == n+1 {
			want = actAllow // clone without namespace flags
		}
		if got := run(t, vm, 7, nr); got != want {
			t.Errorf("syscall %d: got %v, want %v", nr, got, want)
		}
	}
	if got := run(t, vm, 7, n+1, unix.CLONE_NEWUSER); got != actEPERM {
		t.Errorf("clone(CLONE_NEWUSER): got %v, want EPERM", got)
	}
	if got := run(t, vm, 7, 0xffffffff); got != actEPERM {
		t.Errorf("syscall 0xffffffff: got %v, want EPERM", got)
	}
}
