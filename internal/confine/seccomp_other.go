//go:build !linux

package confine

import (
	"errors"
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// ErrNoNewPrivs says InstallThread was called on a thread without
// no_new_privs.
var ErrNoNewPrivs = errors.New("no_new_privs is not set on this thread")

// Workload needs Linux.
func Workload() (*Filter, error) {
	return nil, fmt.Errorf("build seccomp filter: %w", sandbox.ErrUnsupported)
}

// InstallThread needs Linux.
func (f *Filter) InstallThread() error {
	return fmt.Errorf("install seccomp filter: %w", sandbox.ErrUnsupported)
}

// Supported reports that seccomp needs Linux.
func Supported() error { return fmt.Errorf("seccomp: %w", sandbox.ErrUnsupported) }

// WorkloadWithClone3 is not supported off Linux.
func WorkloadWithClone3() (*Filter, error) { return Workload() }
