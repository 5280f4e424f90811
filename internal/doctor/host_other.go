//go:build !linux

package doctor

import "runtime"

// hostInfo knows only the OS off Linux.
func hostInfo() HostInfo {
	return HostInfo{OS: runtime.GOOS}
}
