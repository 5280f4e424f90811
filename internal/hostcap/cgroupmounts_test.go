package hostcap

import (
	"reflect"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/mountinfo"
)

// hybridMountinfo is the cgroup part of the development machine's table.
const hybridMountinfo = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

// v2Mountinfo is a typical systemd host with cgroup v2 only.
const v2Mountinfo = `22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw
25 24 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:2 - sysfs sysfs rw
30 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`

// comountedMountinfo is a v1 host (Docker-era Ubuntu) that co-mounts
// cpu,cpuacct and net_cls,net_prio, and has no cgroup2.
const comountedMountinfo = `27 21 0:24 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
30 27 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:13 - cgroup cgroup rw,cpu,cpuacct
31 27 0:28 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,memory
32 27 0:29 / /sys/fs/cgroup/net_cls,net_prio rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,net_cls,net_prio
33 27 0:30 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,pids
34 27 0:31 / /sys/fs/cgroup/freezer rw,nosuid,nodev,noexec,relatime shared:17 - cgroup cgroup rw,freezer
`

func TestFindCgroupMounts(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		wantV1   map[string]string
		wantV2   string
		wantMode string
	}{
		{
			name: "hybrid host",
			in:   hybridMountinfo,
			wantV1: map[string]string{
				"cpu": "/sys/fs/cgroup/cpu", "cpuacct": "/sys/fs/cgroup/cpuacct",
				"cpuset": "/sys/fs/cgroup/cpuset", "memory": "/sys/fs/cgroup/memory",
				"devices": "/sys/fs/cgroup/devices", "freezer": "/sys/fs/cgroup/freezer",
				"blkio": "/sys/fs/cgroup/blkio", "pids": "/sys/fs/cgroup/pids",
			},
			wantV2:   "/sys/fs/cgroup/unified",
			wantMode: "hybrid",
		},
		{
			name:     "v2 only",
			in:       v2Mountinfo,
			wantV1:   map[string]string{},
			wantV2:   "/sys/fs/cgroup",
			wantMode: "v2",
		},
		{
			name: "v1 co-mounted",
			in:   comountedMountinfo,
			wantV1: map[string]string{
				"cpu": "/sys/fs/cgroup/cpu,cpuacct", "cpuacct": "/sys/fs/cgroup/cpu,cpuacct",
				"memory": "/sys/fs/cgroup/memory", "net_cls": "/sys/fs/cgroup/net_cls,net_prio",
				"net_prio": "/sys/fs/cgroup/net_cls,net_prio", "pids": "/sys/fs/cgroup/pids",
				"freezer": "/sys/fs/cgroup/freezer",
			},
			wantMode: "v1",
		},
		{
			name:     "first mount of a hierarchy wins",
			in:       "1 0 0:1 / /a rw - cgroup cgroup rw,memory\n2 0 0:1 / /b rw - cgroup cgroup rw,memory\n3 0 0:2 / /c rw - cgroup2 cgroup2 rw\n4 0 0:2 / /d rw - cgroup2 cgroup2 rw\n",
			wantV1:   map[string]string{"memory": "/a"},
			wantV2:   "/c",
			wantMode: "hybrid",
		},
		{
			name:     "named hierarchy only is not v1",
			in:       "1 0 0:1 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd\n",
			wantV1:   map[string]string{},
			wantMode: "",
		},
		{
			name:     "no cgroups",
			in:       "22 1 259:2 / / rw - ext4 /dev/sda1 rw\n",
			wantV1:   map[string]string{},
			wantMode: "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mounts, err := mountinfo.Parse(strings.NewReader(tt.in))
			if err != nil {
				t.Fatalf("mountinfo.Parse() error = %v", err)
			}
			got := findCgroupMounts(mounts)
			if !reflect.DeepEqual(got.V1, tt.wantV1) {
				t.Errorf("V1 = %v, want %v", got.V1, tt.wantV1)
			}
			if got.V2 != tt.wantV2 {
				t.Errorf("V2 = %q, want %q", got.V2, tt.wantV2)
			}
			if m := got.Mode(); m != tt.wantMode {
				t.Errorf("Mode() = %q, want %q", m, tt.wantMode)
			}
		})
	}
}

func TestParseControllers(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"hugetlb\n", []string{"hugetlb"}},
		{"cpuset cpu io memory hugetlb pids rdma misc\n", []string{"cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"}},
		{"", []string{}},
		{"\n", []string{}},
	}
	for _, tt := range tests {
		if got := parseControllers(tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("parseControllers(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestMissing(t *testing.T) {
	tests := []struct {
		want, have, out []string
	}{
		{[]string{"memory", "pids", "cpu"}, []string{"hugetlb"}, []string{"memory", "pids", "cpu"}},
		{[]string{"memory", "pids", "cpu"}, []string{"cpu", "memory", "pids", "io"}, nil},
		{[]string{"memory", "pids"}, []string{"pids"}, []string{"memory"}},
		{nil, []string{"pids"}, nil},
	}
	for _, tt := range tests {
		if got := missing(tt.want, tt.have); !reflect.DeepEqual(got, tt.out) {
			t.Errorf("missing(%q, %q) = %q, want %q", tt.want, tt.have, got, tt.out)
		}
	}
}

func FuzzFindCgroupMounts(f *testing.F) {
	f.Add(hybridMountinfo)
	f.Add(v2Mountinfo)
	f.Add(comountedMountinfo)
	f.Add(`50 22 0:40 /a\134b /mnt/my\040disk rw - tmpfs tmpfs rw`)
	f.Fuzz(func(t *testing.T, in string) {
		mounts, err := mountinfo.Parse(strings.NewReader(in))
		if err != nil {
			return
		}
		cm := findCgroupMounts(mounts)
		switch cm.Mode() {
		case "", "v1", "v2", "hybrid":
		default:
			t.Fatalf("Mode() = %q", cm.Mode())
		}
	})
}
