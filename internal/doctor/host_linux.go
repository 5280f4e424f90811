package doctor

import (
	"os"

	"golang.org/x/sys/unix"
)

// hostInfo fills in what the kernel and /etc/os-release say.
func hostInfo() HostInfo {
	var h HostInfo
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		h.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	for _, p := range []string{"/etc/os-release", "/usr/lib/os-release"} {
		if f, err := os.Open(p); err == nil {
			h.OS = parseOSRelease(f)
			f.Close()
			break
		}
	}
	if h.OS == "" {
		h.OS = "linux"
	}
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err == nil {
		h.MemoryBytes = uint64(si.Totalram) * uint64(si.Unit)
	}
	return h
}
