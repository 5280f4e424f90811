//go:build linux && amd64

package hostcap

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// KVM ioctls with arguments, and exit reasons (linux/kvm.h, x86).
const (
	kvmSetUserMemoryRegion = 0x4020AE46 // _IOW(KVMIO, 0x46, struct kvm_userspace_memory_region)
	kvmSetRegs             = 0x4090AE82 // _IOW(KVMIO, 0x82, struct kvm_regs)
	kvmGetSregs            = 0x8138AE83 // _IOR(KVMIO, 0x83, struct kvm_sregs)
	kvmSetSregs            = 0x4138AE84 // _IOW(KVMIO, 0x84, struct kvm_sregs)
	kvmExitHLT             = 5
	kvmExitIntr            = 10
	kvmSregsSize           = 312 // sizeof(struct kvm_sregs)
)

// kvmUserspaceMemoryRegion is struct kvm_userspace_memory_region.
type kvmUserspaceMemoryRegion struct {
	Slot          uint32
	Flags         uint32
	GuestPhysAddr uint64
	MemorySize    uint64
	UserspaceAddr uint64
}

// kvmIoctl issues an ioctl whose argument is a pointer.
func kvmIoctl(fd int, req uintptr, arg unsafe.Pointer) error {
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg)); errno != 0 {
		return errno
	}
	return nil
}

// kvmRunGuest runs code as a real-mode guest at address 0 in vm (hlt,
// 0xf4, when code is nil) and expects it to exit with KVM_EXIT_HLT before
// ctx is done.
func kvmRunGuest(ctx context.Context, kvm, vm int, code []byte) (string, error) {
	if code == nil {
		code = []byte{0xf4} // hlt
	}
	runSize, err := unix.IoctlRetInt(kvm, kvmGetVCPUMmapSize)
	if err != nil {
		return "", fmt.Errorf("KVM_GET_VCPU_MMAP_SIZE: %w", err)
	}
	mem, err := unix.Mmap(-1, 0, unix.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return "", fmt.Errorf("map guest memory: %w", err)
	}
	defer func() { _ = unix.Munmap(mem) }()
	copy(mem, code)
	region := kvmUserspaceMemoryRegion{
		MemorySize:    uint64(len(mem)),
		UserspaceAddr: uint64(uintptr(unsafe.Pointer(&mem[0]))),
	}
	if err := kvmIoctl(vm, kvmSetUserMemoryRegion, unsafe.Pointer(&region)); err != nil {
		return "", fmt.Errorf("KVM_SET_USER_MEMORY_REGION: %w", err)
	}
	vcpu, err := unix.IoctlRetInt(vm, kvmCreateVCPU)
	if err != nil {
		return "", fmt.Errorf("KVM_CREATE_VCPU: %w", err)
	}
	defer unix.Close(vcpu)
	run, err := unix.Mmap(vcpu, 0, runSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return "", fmt.Errorf("map vcpu run area: %w", err)
	}
	defer func() { _ = unix.Munmap(run) }()

	// Real mode, code segment at 0: cs is the first kvm_segment in
	// kvm_sregs, with base at offset 0 and selector at offset 12.
	var sregs [kvmSregsSize]byte
	if err := kvmIoctl(vcpu, kvmGetSregs, unsafe.Pointer(&sregs[0])); err != nil {
		return "", fmt.Errorf("KVM_GET_SREGS: %w", err)
	}
	binary.LittleEndian.PutUint64(sregs[0:], 0)
	binary.LittleEndian.PutUint16(sregs[12:], 0)
	if err := kvmIoctl(vcpu, kvmSetSregs, unsafe.Pointer(&sregs[0])); err != nil {
		return "", fmt.Errorf("KVM_SET_SREGS: %w", err)
	}
	// kvm_regs is 18 u64: rax … r15, rip, rflags. Bit 1 of rflags is
	// always set.
	var regs [18]uint64
	regs[16], regs[17] = 0, 2
	if err := kvmIoctl(vcpu, kvmSetRegs, unsafe.Pointer(&regs[0])); err != nil {
		return "", fmt.Errorf("KVM_SET_REGS: %w", err)
	}
	if err := kvmRunUntilHLT(ctx, vcpu, run); err != nil {
		return "", err
	}
	return "ran a guest to hlt", nil
}

// kvmRunUntilHLT calls KVM_RUN until the guest halts. When ctx is done, a
// watchdog signals the vcpu's thread so that KVM_RUN returns EINTR.
func kvmRunUntilHLT(ctx context.Context, vcpu int, run []byte) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pid, tid := unix.Getpid(), unix.Gettid()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			// The Go runtime tolerates stray SIGURGs: it uses them to preempt.
			_ = unix.Tgkill(pid, tid, unix.SIGURG)
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	for {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(vcpu), kvmRun, 0)
		switch {
		case errno == unix.EINTR || errno == unix.EAGAIN:
		case errno != 0:
			return fmt.Errorf("KVM_RUN: %w", errno)
		default:
			switch reason := binary.LittleEndian.Uint32(run[8:12]); reason {
			case kvmExitHLT:
				return nil
			case kvmExitIntr:
			default:
				return fmt.Errorf("KVM_RUN exited with reason %d, want KVM_EXIT_HLT (%d)", reason, kvmExitHLT)
			}
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("KVM_RUN: guest did not halt: %w", err)
		}
	}
}
