package hostcap

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// mount is one line of /proc/self/mountinfo.
type mount struct {
	Root      string   // root of the mount within its filesystem
	Point     string   // mount point
	FSType    string   // filesystem type, such as "cgroup2"
	SuperOpts []string // per-superblock options; cgroup v1 lists its controllers here
}

// parseMountinfo reads the format of /proc/<pid>/mountinfo (see proc(5)):
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
func parseMountinfo(r io.Reader) ([]mount, error) {
	var mounts []mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		// Six fixed fields, then optional fields, "-", type, source, options.
		if sep < 6 || len(f) < sep+4 {
			return nil, fmt.Errorf("parse mountinfo line %d: malformed: %q", n, line)
		}
		mounts = append(mounts, mount{
			Root:      unescapeOctal(f[3]),
			Point:     unescapeOctal(f[4]),
			FSType:    f[sep+1],
			SuperOpts: strings.Split(f[sep+3], ","),
		})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	return mounts, nil
}

// unescapeOctal undoes the kernel's \NNN escaping of spaces, tabs, newlines
// and backslashes in mountinfo paths.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// v1Controllers are the cgroup v1 controllers the kernel knows. Named
// hierarchies (name=systemd) carry no controller.
var v1Controllers = []string{
	"blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer", "hugetlb",
	"memory", "misc", "net_cls", "net_prio", "perf_event", "pids", "rdma",
}

// cgroupMounts says where the cgroup filesystems are mounted.
type cgroupMounts struct {
	// V1 maps each mounted cgroup v1 controller to its mount point.
	// Co-mounted controllers (cpu,cpuacct) share one.
	V1 map[string]string
	// V2 is the first cgroup2 mount point, "" when none is mounted.
	V2 string
}

// findCgroupMounts picks the cgroup mounts out of a mount table. When a
// hierarchy is mounted more than once, the first mount wins.
func findCgroupMounts(mounts []mount) cgroupMounts {
	c := cgroupMounts{V1: map[string]string{}}
	for _, m := range mounts {
		switch m.FSType {
		case "cgroup":
			for _, o := range m.SuperOpts {
				if !slices.Contains(v1Controllers, o) {
					continue
				}
				if _, ok := c.V1[o]; !ok {
					c.V1[o] = m.Point
				}
			}
		case "cgroup2":
			if c.V2 == "" {
				c.V2 = m.Point
			}
		}
	}
	return c
}

// Mode says how cgroups are set up: "v1" (controllers on v1 hierarchies
// only), "v2" (a cgroup2 mount and no v1 controllers), "hybrid" (both), or
// "" (no cgroup filesystem is mounted).
func (c cgroupMounts) Mode() string {
	switch {
	case len(c.V1) > 0 && c.V2 != "":
		return "hybrid"
	case len(c.V1) > 0:
		return "v1"
	case c.V2 != "":
		return "v2"
	}
	return ""
}

// parseControllers splits the content of cgroup.controllers or
// cgroup.subtree_control ("cpu memory pids\n").
func parseControllers(s string) []string {
	f := strings.Fields(s)
	if f == nil {
		return []string{}
	}
	return f
}

// missing returns the elements of want that have is lacks, in want's order.
func missing(want, have []string) []string {
	var out []string
	for _, w := range want {
		if !slices.Contains(have, w) {
			out = append(out, w)
		}
	}
	return out
}
