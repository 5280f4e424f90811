//go:build linux && !amd64 && !arm64

package confine

// native is nil: there is no syscall table for this architecture, so
// Workload and Supported report it unsupported.
var native *archInfo
