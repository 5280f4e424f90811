//go:build !amd64

package hostcap

import (
	"context"
	"fmt"

	"golang.org/x/sys/unix"
)

// kvmRunGuest creates a vcpu in vm. Running guest code is implemented for
// amd64 only.
func kvmRunGuest(_ context.Context, _, vm int, _ []byte) (string, error) {
	vcpu, err := unix.IoctlRetInt(vm, kvmCreateVCPU)
	if err != nil {
		return "", fmt.Errorf("KVM_CREATE_VCPU: %w", err)
	}
	_ = unix.Close(vcpu)
	return "created a vcpu", nil
}
