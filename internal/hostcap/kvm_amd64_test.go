//go:build linux && amd64

package hostcap

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestKVMGuestTimeout(t *testing.T) {
	kvm, vm := openKVM(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	// jmp $: a guest that never halts.
	_, err := kvmRunGuest(ctx, kvm, vm, []byte{0xeb, 0xfe})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("kvmRunGuest(loop) error = %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("kvmRunGuest(loop) returned after %v, want soon after the 200ms deadline", d)
	}
}
