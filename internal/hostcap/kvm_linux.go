package hostcap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// KVM ioctls without arguments (linux/kvm.h: _IO(KVMIO, n), KVMIO = 0xAE).
const (
	kvmGetAPIVersion     = 0xAE00
	kvmCreateVM          = 0xAE01
	kvmGetVCPUMmapSize   = 0xAE04
	kvmCreateVCPU        = 0xAE41
	kvmRun               = 0xAE80
	kvmAPIVersion        = 12
	kvmDevice            = "/dev/kvm"
	kvmSysModules        = "/sys/module/"
	kvmPVMWhy            = "/dev/kvm is the PVM variant (kvm_pvm): stock guest kernels cannot boot on it; microVMs run under software emulation (TCG) only"
	kvmPVMFix            = "use a host with kvm_intel or kvm_amd (bare metal, or a VM with nested virtualization)"
	kvmNoDeviceFix       = "modprobe kvm_intel (or kvm_amd); in a VM, enable nested virtualization"
	kvmPermissionFixTail = "or add the user to the kvm group: usermod -aG kvm $USER"
)

// kvmModules returns the loaded KVM vendor modules (kvm_intel, kvm_amd,
// kvm_pvm).
func kvmModules() []string {
	var mods []string
	for _, m := range []string{"kvm_intel", "kvm_amd", "kvm_pvm"} {
		if _, err := os.Stat(kvmSysModules + m); err == nil {
			mods = append(mods, m)
		}
	}
	return mods
}

// isPVM says whether /dev/kvm comes from kvm_pvm alone.
func isPVM(mods []string) bool {
	return len(mods) == 1 && mods[0] == "kvm_pvm"
}

// probeKVM opens /dev/kvm, checks the API version, creates a VM and runs
// a tiny guest in it. A PVM /dev/kvm is reported as not OK even when the
// tiny guest runs, since stock guest kernels cannot boot on it.
func probeKVM(ctx context.Context) Result {
	fd, err := unix.Open(kvmDevice, unix.O_RDWR|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return fail("no /dev/kvm: the kvm module is not loaded or the CPU exposes no virtualization extensions", kvmNoDeviceFix)
	case errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM):
		return fail("cannot open /dev/kvm: permission denied"+notRoot(), rootFix+", "+kvmPermissionFixTail)
	case err != nil:
		return fail(fmt.Sprintf("open /dev/kvm: %v", err), kvmNoDeviceFix)
	}
	defer unix.Close(fd)
	v, err := unix.IoctlRetInt(fd, kvmGetAPIVersion)
	if err != nil {
		return fail(fmt.Sprintf("KVM_GET_API_VERSION: %v", err), kvmNoDeviceFix)
	}
	if v != kvmAPIVersion {
		return fail(fmt.Sprintf("KVM API version is %d, want %d", v, kvmAPIVersion), kvmNoDeviceFix)
	}
	vm, err := unix.IoctlRetInt(fd, kvmCreateVM)
	if err != nil {
		return fail(fmt.Sprintf("KVM_CREATE_VM: %v", err), kvmNoDeviceFix)
	}
	defer unix.Close(vm)
	mods := kvmModules()
	what, runErr := kvmRunGuest(ctx, fd, vm, nil)
	detail := "API 12"
	if runErr == nil {
		detail += ", " + what
	}
	if len(mods) > 0 {
		detail += " (" + strings.Join(mods, ", ") + ")"
	}
	if isPVM(mods) {
		// A one-instruction guest runs on PVM, a stock kernel does not.
		r := fail(kvmPVMWhy, kvmPVMFix)
		r.Detail = detail
		return r
	}
	if runErr != nil {
		return fail(fmt.Sprintf("a KVM guest does not run: %v", runErr), kvmNoDeviceFix)
	}
	return ok(detail)
}
