package hostcap

import (
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/mountinfo"
)

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
func findCgroupMounts(mounts []mountinfo.Mount) cgroupMounts {
	c := cgroupMounts{V1: map[string]string{}}
	for _, m := range mounts {
		switch m.FSType {
		case "cgroup":
			for _, o := range m.SuperOptions {
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
