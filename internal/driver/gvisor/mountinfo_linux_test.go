package gvisor

import (
	"bufio"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/mountinfo"
)

// hostMountinfo is a host's table with cgroup v1 and v2 mounts, mount points
// with escaped spaces and backslashes, and a bundle with pinned mounts.
const hostMountinfo = `22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/vda rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime shared:14 - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
42 31 0:39 / /run/my\040cgroups/pids\134x rw - cgroup cgroup rw,pids
50 22 0:40 / /run/airlock/gvisor/bundles/abc rw - tmpfs tmpfs rw
51 50 259:2 /srv/data /run/airlock/gvisor/bundles/abc/pin/m\0400 ro,nosuid,nodev - ext4 /dev/vda rw
52 22 0:41 / /run/airlock/gvisor/bundles/abcdef rw - tmpfs tmpfs rw
`

func TestCgroupPoints(t *testing.T) {
	got := cgroupPoints(strings.NewReader(hostMountinfo))
	want := []string{"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/unified", `/run/my cgroups/pids\x`}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("cgroupPoints = %q, want %q", got, want)
	}
}

func TestPointsBelow(t *testing.T) {
	for _, tt := range []struct {
		dir  string
		want []string
	}{
		{"/run/airlock/gvisor/bundles/abc", []string{"/run/airlock/gvisor/bundles/abc", "/run/airlock/gvisor/bundles/abc/pin/m 0"}},
		{"/run/airlock/gvisor/bundles/abc/pin", []string{"/run/airlock/gvisor/bundles/abc/pin/m 0"}},
		{"/run/my cgroups", []string{`/run/my cgroups/pids\x`}},
		{"/nowhere", nil},
	} {
		if got := pointsBelow(strings.NewReader(hostMountinfo), tt.dir); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("pointsBelow(%q) = %q, want %q", tt.dir, got, tt.want)
		}
	}
}

// TestHostMountReaders checks the readers of the host's own table against
// /proc/self/mounts, the kernel's other account of the same mounts.
func TestHostMountReaders(t *testing.T) {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cgroups, below []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		point := mountinfo.Unescape(fields[1])
		if fields[2] == "cgroup" || fields[2] == "cgroup2" {
			cgroups = append(cgroups, point)
		}
		if point == "/sys" || strings.HasPrefix(point, "/sys/") {
			below = append(below, point)
		}
	}
	if got := cgroupMounts(); !slices.Equal(got, cgroups) {
		t.Errorf("cgroupMounts = %q; /proc/self/mounts has %q", got, cgroups)
	}
	if got := mountsBelow("/sys"); !slices.Equal(got, below) || len(got) == 0 {
		t.Errorf("mountsBelow(/sys) = %q; /proc/self/mounts has %q", got, below)
	}
}
