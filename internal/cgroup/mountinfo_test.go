package cgroup

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// hybridMountinfo is the development machine's table: every v1 controller
// in its own hierarchy, and a cgroup2 mount that offers only hugetlb.
const hybridMountinfo = `22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/vda rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
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

// comountedMountinfo is a systemd v1 host: cpu and cpuacct share one
// hierarchy, as do net_cls and net_prio; optional fields are present.
const comountedMountinfo = `27 21 0:24 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
28 27 0:25 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
29 27 0:26 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
30 27 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:13 - cgroup cgroup rw,cpu,cpuacct
31 27 0:28 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,memory
32 27 0:29 / /sys/fs/cgroup/net_cls,net_prio rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,net_cls,net_prio
33 27 0:30 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,pids
34 27 0:31 / /sys/fs/cgroup/freezer rw,nosuid,nodev,noexec,relatime shared:17 - cgroup cgroup rw,freezer
35 27 0:32 / /sys/fs/cgroup/cpuset rw,nosuid,nodev,noexec,relatime shared:18 - cgroup cgroup rw,cpuset
`

// v2Mountinfo is a modern systemd host with the unified hierarchy only.
const v2Mountinfo = `22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw
25 24 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:2 - sysfs sysfs rw
30 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
31 25 0:27 / /sys/fs/pstore rw,nosuid,nodev,noexec,relatime shared:10 - pstore pstore rw
`

// noCgroupMountinfo is a minimal container or chroot without cgroups.
const noCgroupMountinfo = `22 1 259:2 / / rw,relatime - ext4 /dev/vda rw
23 22 0:5 / /proc rw,nosuid,nodev,noexec - proc proc rw
24 22 0:6 / /sys ro,nosuid,nodev,noexec - sysfs sysfs ro
`

// noFreezerMountinfo is the hybrid machine without the freezer hierarchy.
var noFreezerMountinfo = strings.Replace(hybridMountinfo, "37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer\n", "", 1)

// noFreezerNoV2Mountinfo is a v1 host without the freezer and without cgroup2.
var noFreezerNoV2Mountinfo = strings.Replace(noFreezerMountinfo, "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n", "", 1)

// escapedMountinfo has mount points with spaces (\040) and a backslash (\134).
const escapedMountinfo = `32 31 0:29 / /run/my\040cgroups/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /run/my\040cgroups/memory rw - cgroup cgroup rw,memory
37 31 0:34 / /run/my\040cgroups/free\134zer rw - cgroup cgroup rw,freezer
39 31 0:36 / /run/my\040cgroups/pids\040 rw - cgroup cgroup rw,pids
`

// controllersFrom returns a controllers function that answers for mount
// only, and records that it was asked.
func controllersFrom(mount string, have []string, err error, asked *[]string) func(string) ([]string, error) {
	return func(m string) ([]string, error) {
		*asked = append(*asked, m)
		if m != mount {
			return nil, errors.New("no such mount " + m)
		}
		return have, err
	}
}

func TestParseMountinfo(t *testing.T) {
	v1 := func(dirs map[string]string) *Hierarchy { return &Hierarchy{Mounts: dirs} }
	tests := []struct {
		name string
		in   string
		// the cgroup2 mount and what it offers
		v2Mount string
		v2Have  []string
		v2Err   error
		want    *Hierarchy
		// wantErr are parts of the error message
		wantErr []string
		// wantAsked lists the mounts whose controllers must be read
		wantAsked []string
	}{
		{
			name: "hybrid: v1 controllers win over a hugetlb-only cgroup2",
			in:   hybridMountinfo, v2Mount: "/sys/fs/cgroup/unified", v2Have: []string{"hugetlb"},
			want: v1(map[string]string{
				"memory": "/sys/fs/cgroup/memory", "pids": "/sys/fs/cgroup/pids", "cpu": "/sys/fs/cgroup/cpu",
				"cpuacct": "/sys/fs/cgroup/cpuacct", "freezer": "/sys/fs/cgroup/freezer",
			}),
		},
		{
			name: "v1 with cpu,cpuacct co-mounted",
			in:   comountedMountinfo, v2Mount: "/sys/fs/cgroup/unified",
			want: v1(map[string]string{
				"memory": "/sys/fs/cgroup/memory", "pids": "/sys/fs/cgroup/pids", "cpu": "/sys/fs/cgroup/cpu,cpuacct",
				"cpuacct": "/sys/fs/cgroup/cpu,cpuacct", "freezer": "/sys/fs/cgroup/freezer",
			}),
		},
		{
			name: "pure v2",
			in:   v2Mountinfo, v2Mount: "/sys/fs/cgroup", v2Have: []string{"cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"},
			want:      &Hierarchy{V2: true, Mounts: map[string]string{"memory": "/sys/fs/cgroup", "pids": "/sys/fs/cgroup", "cpu": "/sys/fs/cgroup"}},
			wantAsked: []string{"/sys/fs/cgroup"},
		},
		{
			name: "pure v2 without pids delegated",
			in:   v2Mountinfo, v2Mount: "/sys/fs/cgroup", v2Have: []string{"cpu", "memory"},
			wantErr:   []string{"no usable cgroups", "/sys/fs/cgroup does not offer memory, pids, cpu", `"cpu memory"`},
			wantAsked: []string{"/sys/fs/cgroup"},
		},
		{
			name: "pure v2 whose controllers cannot be read",
			in:   v2Mountinfo, v2Mount: "/sys/fs/cgroup", v2Err: errors.New("permission denied"),
			wantErr:   []string{"no usable cgroups", "/sys/fs/cgroup"},
			wantAsked: []string{"/sys/fs/cgroup"},
		},
		{
			name:    "no cgroups at all",
			in:      noCgroupMountinfo,
			wantErr: []string{"no cgroup file system is mounted"},
		},
		{
			name:    "empty table",
			in:      "",
			wantErr: []string{"no cgroup file system is mounted"},
		},
		{
			name: "hybrid without the freezer",
			in:   noFreezerMountinfo, v2Mount: "/sys/fs/cgroup/unified", v2Have: []string{"hugetlb"},
			wantErr:   []string{"the v1 controllers freezer are not mounted", "/sys/fs/cgroup/unified", `"hugetlb"`},
			wantAsked: []string{"/sys/fs/cgroup/unified"},
		},
		{
			// The message must name what is missing, not claim that no
			// cgroup file system is mounted.
			name:    "v1 without the freezer and without cgroup2",
			in:      noFreezerNoV2Mountinfo,
			wantErr: []string{"freezer"},
		},
		{
			name: "hybrid without the freezer but a capable cgroup2",
			in:   noFreezerMountinfo, v2Mount: "/sys/fs/cgroup/unified", v2Have: []string{"memory", "pids", "cpu"},
			want:      &Hierarchy{V2: true, Mounts: map[string]string{"memory": "/sys/fs/cgroup/unified", "pids": "/sys/fs/cgroup/unified", "cpu": "/sys/fs/cgroup/unified"}},
			wantAsked: []string{"/sys/fs/cgroup/unified"},
		},
		{
			name: "escaped mount points",
			in:   escapedMountinfo,
			want: v1(map[string]string{
				"memory": "/run/my cgroups/memory", "pids": "/run/my cgroups/pids ", "cpu": "/run/my cgroups/cpu,cpuacct",
				"cpuacct": "/run/my cgroups/cpu,cpuacct", "freezer": `/run/my cgroups/free\zer`,
			}),
		},
		{
			name: "first mount of a controller wins",
			in: comountedMountinfo +
				"90 27 0:28 / /mnt/memory-again rw - cgroup cgroup rw,memory\n" +
				"91 27 0:33 / /mnt/second-unified rw - cgroup2 cgroup2 rw\n",
			v2Mount: "/sys/fs/cgroup/unified",
			want: v1(map[string]string{
				"memory": "/sys/fs/cgroup/memory", "pids": "/sys/fs/cgroup/pids", "cpu": "/sys/fs/cgroup/cpu,cpuacct",
				"cpuacct": "/sys/fs/cgroup/cpu,cpuacct", "freezer": "/sys/fs/cgroup/freezer",
			}),
		},
		{
			name:    "first cgroup2 mount is the one asked",
			in:      v2Mountinfo + "40 25 0:40 / /mnt/other rw - cgroup2 cgroup2 rw\n",
			v2Mount: "/sys/fs/cgroup", v2Have: []string{"memory", "pids", "cpu"},
			want:      &Hierarchy{V2: true, Mounts: map[string]string{"memory": "/sys/fs/cgroup", "pids": "/sys/fs/cgroup", "cpu": "/sys/fs/cgroup"}},
			wantAsked: []string{"/sys/fs/cgroup"},
		},
		{
			name: "cpuset and name=systemd are not cpu",
			in: "1 0 0:1 / /c/cpuset rw - cgroup cgroup rw,cpuset\n" +
				"2 0 0:2 / /c/systemd rw - cgroup cgroup rw,name=systemd\n" +
				"3 0 0:3 / /c/cpuacct rw - cgroup cgroup rw,cpuacct\n" +
				"4 0 0:4 / /c/memory rw - cgroup cgroup rw,memory\n" +
				"5 0 0:5 / /c/pids rw - cgroup cgroup rw,pids\n" +
				"6 0 0:6 / /c/freezer rw - cgroup cgroup rw,freezer\n" +
				"7 0 0:7 / /c/unified rw - cgroup2 cgroup2 rw\n",
			v2Mount:   "/c/unified",
			wantErr:   []string{"the v1 controllers cpu are not mounted"},
			wantAsked: []string{"/c/unified"},
		},
		{
			name: "malformed lines are skipped",
			in: "garbage\n- - -\n1 2 - cgroup cgroup rw,memory\n\n" +
				"short - cgroup\n" + comountedMountinfo,
			want: v1(map[string]string{
				"memory": "/sys/fs/cgroup/memory", "pids": "/sys/fs/cgroup/pids", "cpu": "/sys/fs/cgroup/cpu,cpuacct",
				"cpuacct": "/sys/fs/cgroup/cpu,cpuacct", "freezer": "/sys/fs/cgroup/freezer",
			}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var asked []string
			h, err := parseMountinfo(strings.NewReader(tt.in), controllersFrom(tt.v2Mount, tt.v2Have, tt.v2Err, &asked))
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("parseMountinfo = %+v, want an error", h)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
			} else {
				if err != nil {
					t.Fatalf("parseMountinfo: %v", err)
				}
				if !reflect.DeepEqual(h, tt.want) {
					t.Errorf("parseMountinfo = %+v, want %+v", h, tt.want)
				}
			}
			if !reflect.DeepEqual(asked, tt.wantAsked) {
				t.Errorf("controllers read for %q, want %q", asked, tt.wantAsked)
			}
		})
	}
}
