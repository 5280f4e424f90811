package hostcap

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/mountinfo"
)

// v1Required are the cgroup v1 controllers the native driver uses.
var v1Required = []string{"memory", "pids", "cpu", "cpuacct", "freezer"}

// v2Required are the cgroup v2 controllers the native driver uses.
var v2Required = []string{"memory", "pids", "cpu"}

// v2Fix moves every controller to cgroup v2.
const v2Fix = "boot with systemd.unified_cgroup_hierarchy=1 cgroup_no_v1=all to give all controllers to " +
	"cgroup v2; until then the native driver uses cgroup v1"

// probeSeq makes the names of concurrent probe cgroups unique.
var probeSeq atomic.Uint64

// probeCgroupName names a throw-away cgroup.
func probeCgroupName() string {
	return fmt.Sprintf("airlock-probe-%d-%d", os.Getpid(), probeSeq.Add(1))
}

// readCgroupMounts finds this process's cgroup mounts.
func readCgroupMounts() (cgroupMounts, error) {
	mounts, err := mountinfo.Read()
	if err != nil {
		return cgroupMounts{}, err
	}
	return findCgroupMounts(mounts), nil
}

// CgroupControllers lists the cgroup controllers this host mounts and
// says how (CgroupMode): on v2, those the root's cgroup.controllers
// offers; otherwise those mounted on v1 hierarchies.
func CgroupControllers() (controllers []string, mode string, err error) {
	m, err := readCgroupMounts()
	if err != nil {
		return nil, "", err
	}
	mode = m.Mode()
	if mode == "v2" {
		b, err := os.ReadFile(filepath.Join(m.V2, "cgroup.controllers"))
		if err != nil {
			return nil, mode, fmt.Errorf("read the cgroup v2 controllers: %w", err)
		}
		return parseControllers(string(b)), mode, nil
	}
	for c := range m.V1 {
		controllers = append(controllers, c)
	}
	slices.Sort(controllers)
	return controllers, mode, nil
}

// CgroupMode says how this host mounts cgroups: "v1", "v2", "hybrid", or ""
// when no cgroup filesystem is mounted or the mount table is unreadable.
func CgroupMode() string {
	cm, err := readCgroupMounts()
	if err != nil {
		return ""
	}
	return cm.Mode()
}

// cgroupStep checks one controller in a test cgroup: it writes value to
// file, or only reads file when value is "".
type cgroupStep struct{ file, value string }

// v1Steps say how each v1 controller is exercised.
var v1Steps = map[string]cgroupStep{
	"memory":  {"memory.limit_in_bytes", "67108864"},
	"pids":    {"pids.max", "64"},
	"cpu":     {"cpu.cfs_quota_us", "50000"},
	"cpuacct": {"cpuacct.usage", ""},
	"freezer": {"freezer.state", "THAWED"},
}

// v2Steps say how each v2 controller is exercised.
var v2Steps = map[string]cgroupStep{
	"memory": {"memory.max", "67108864"},
	"pids":   {"pids.max", "64"},
	"cpu":    {"cpu.max", "50000 100000"},
}

// cgroupWhy describes a failed cgroup step, saying when root is needed.
func cgroupWhy(err error) (why, fix string) {
	why = err.Error()
	switch {
	case errors.Is(err, fs.ErrPermission) && !isRoot():
		return why + notRoot(), rootFix
	case errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS):
		return why, "make the cgroup filesystem writable: run airlock on the host, or in a container " +
			"with --privileged --cgroupns=host"
	}
	return why, "check the kernel log (dmesg) for cgroup errors"
}

// probeCgroupV1 creates a test cgroup in each of the memory, pids, cpu,
// cpuacct and freezer v1 hierarchies, writes a limit, and removes it.
func probeCgroupV1(ctx context.Context) Result {
	cm, err := readCgroupMounts()
	if err != nil {
		return fail(err.Error(), "mount /proc")
	}
	if miss := missing(v1Required, slices.Sorted(maps.Keys(cm.V1))); len(miss) > 0 {
		why := fmt.Sprintf("no cgroup v1 hierarchy is mounted for %s", strings.Join(miss, ", "))
		if cm.Mode() == "v2" {
			return fail(why+" (this host uses cgroup v2 only)", "use cgroup v2 (see cgroupv2); the native driver needs only one")
		}
		return fail(why, "mount each one, e.g. mkdir -p /sys/fs/cgroup/memory && "+
			"mount -t cgroup -o memory cgroup /sys/fs/cgroup/memory")
	}
	// Co-mounted controllers (cpu,cpuacct) share a hierarchy and one test cgroup.
	var points []string
	byPoint := map[string][]string{}
	for _, c := range v1Required {
		p := cm.V1[c]
		if _, seen := byPoint[p]; !seen {
			points = append(points, p)
		}
		byPoint[p] = append(byPoint[p], c)
	}
	name := probeCgroupName()
	for _, p := range points {
		if err := ctx.Err(); err != nil {
			return fail(fmt.Sprintf("cgroup v1 probe timed out: %v", err), "")
		}
		if err := tryCgroup(filepath.Join(p, name), byPoint[p], v1Steps); err != nil {
			return fail(cgroupWhy(err))
		}
	}
	return ok(fmt.Sprintf("%s (v1, %s)", strings.Join(v1Required, ", "), describePoints(points)))
}

// describePoints says where the hierarchies are: their common parent when
// they share one, else each mount point.
func describePoints(points []string) string {
	parent := filepath.Dir(points[0])
	for _, p := range points[1:] {
		if filepath.Dir(p) != parent {
			return strings.Join(points, ", ")
		}
	}
	return "under " + parent
}

// tryCgroup creates the cgroup dir, runs the steps of each controller in it,
// and removes it again.
func tryCgroup(dir string, controllers []string, steps map[string]cgroupStep) (err error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("create test cgroup %s: %w", dir, err)
	}
	defer func() {
		if rmErr := os.Remove(dir); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("remove test cgroup %s: %w", dir, rmErr))
		}
	}()
	for _, c := range controllers {
		s := steps[c]
		file := filepath.Join(dir, s.file)
		if s.value == "" {
			if _, err := os.ReadFile(file); err != nil {
				return fmt.Errorf("%s controller: read %s: %w", c, file, err)
			}
			continue
		}
		if err := os.WriteFile(file, []byte(s.value), 0o644); err != nil {
			return fmt.Errorf("%s controller: write %q to %s: %w", c, s.value, file, err)
		}
		got, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("%s controller: read back %s: %w", c, file, err)
		}
		if strings.TrimSpace(string(got)) != s.value {
			return fmt.Errorf("%s controller: wrote %q to %s, read back %q", c, s.value, file, strings.TrimSpace(string(got)))
		}
	}
	return nil
}

// probeCgroupV2 checks that the cgroup2 mount offers memory, pids and cpu,
// enables them for children of its root when they are not yet (which, like
// any container runtime, changes the root's cgroup.subtree_control), then
// creates a test cgroup, writes limits, and removes it.
func probeCgroupV2(ctx context.Context) Result {
	cm, err := readCgroupMounts()
	if err != nil {
		return fail(err.Error(), "mount /proc")
	}
	if cm.V2 == "" {
		return fail("no cgroup2 filesystem is mounted (cgroup v1 only)", v2Fix)
	}
	root := cm.V2
	b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		return fail(fmt.Sprintf("read cgroup v2 controllers: %v", err), v2Fix)
	}
	have := parseControllers(string(b))
	if miss := missing(v2Required, have); len(miss) > 0 {
		offers := "offers no controllers"
		if len(have) > 0 {
			offers = "offers only " + strings.Join(have, ", ")
		}
		why := fmt.Sprintf("cgroup2 at %s %s, not %s", root, offers, strings.Join(miss, ", "))
		var onV1 []string
		for _, c := range miss {
			if _, ok := cm.V1[c]; ok {
				onV1 = append(onV1, c)
			}
		}
		if len(onV1) > 0 {
			why += fmt.Sprintf(": this is a hybrid host, %s are bound to cgroup v1 hierarchies", strings.Join(onV1, ", "))
		}
		return fail(why, v2Fix)
	}
	// Enable the controllers for children; a no-op when they already are.
	sb, err := os.ReadFile(filepath.Join(root, "cgroup.subtree_control"))
	if err != nil {
		return fail(fmt.Sprintf("read cgroup v2 subtree_control: %v", err), v2Fix)
	}
	if need := missing(v2Required, parseControllers(string(sb))); len(need) > 0 {
		file := filepath.Join(root, "cgroup.subtree_control")
		enable := "+" + strings.Join(need, " +")
		if err := os.WriteFile(file, []byte(enable), 0o644); err != nil {
			return fail(cgroupWhy(fmt.Errorf("enable %s in %s: %w", strings.Join(need, ", "), file, err)))
		}
	}
	if err := ctx.Err(); err != nil {
		return fail(fmt.Sprintf("cgroup v2 probe timed out: %v", err), "")
	}
	dir := filepath.Join(root, probeCgroupName())
	if err := tryCgroup(dir, v2Required, v2Steps); err != nil {
		return fail(cgroupWhy(err))
	}
	return ok(fmt.Sprintf("%s (v2 at %s)", strings.Join(v2Required, ", "), root))
}
