// Package cgroup manages the control groups of airlock's sandboxes on cgroup
// v1 (one hierarchy per controller, as on hybrid hosts) and cgroup v2 (one
// unified hierarchy).
//
// The layout of one sandbox, relative to each hierarchy's mount point:
//
//	airlock/<sandbox>/agent        the in-sandbox agent, protected from the workload
//	airlock/<sandbox>/workload     the limits: memory (no swap), CPU quota, pids
//	airlock/<sandbox>/workload/<exec>   one per command, so a kill removes all of it
//
// The package works on files only, with the hierarchy's mount points as
// parameters, so it can be tested against a fake tree.
package cgroup

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/mountinfo"
)

// V1Controllers are the v1 controllers a sandbox needs. cpu and cpuacct are
// often mounted together; Hierarchy handles that.
var V1Controllers = []string{"memory", "pids", "cpu", "cpuacct", "freezer"}

// V2Controllers are the v2 controllers a sandbox needs.
var V2Controllers = []string{"memory", "pids", "cpu"}

// Hierarchy says where the controllers are mounted.
type Hierarchy struct {
	// V2 is true for a unified (v2) hierarchy.
	V2 bool
	// Mounts maps each controller to its mount point. On v2 every
	// controller maps to the one unified mount.
	Mounts map[string]string
}

// Detect finds the controllers airlock needs in /proc/self/mountinfo.
// It prefers v1 when all the v1 controllers are mounted (a hybrid host's
// unified mount then usually holds none of them), else v2.
func Detect() (*Hierarchy, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	defer f.Close()
	return parseMountinfo(f, readControllers)
}

func readControllers(mount string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(mount, "cgroup.controllers"))
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}

// parseMountinfo picks the hierarchies out of a mountinfo table, passing
// over lines that are not well-formed. controllers reads the controllers a
// v2 mount offers.
func parseMountinfo(r io.Reader, controllers func(mount string) ([]string, error)) (*Hierarchy, error) {
	mounts, err := mountinfo.Parse(r)
	var malformed *mountinfo.SyntaxError
	if err != nil && !errors.As(err, &malformed) {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	v1 := map[string]string{}
	var unified string
	for _, m := range mounts {
		switch m.FSType {
		case "cgroup2":
			if unified == "" {
				unified = m.Point
			}
		case "cgroup":
			for _, opt := range m.SuperOptions {
				if slices.Contains(V1Controllers, opt) {
					if _, dup := v1[opt]; !dup {
						v1[opt] = m.Point
					}
				}
			}
		}
	}
	if len(v1) == len(V1Controllers) {
		return &Hierarchy{Mounts: v1}, nil
	}
	if unified != "" {
		have, err := controllers(unified)
		if err == nil && containsAll(have, V2Controllers) {
			m := map[string]string{}
			for _, c := range V2Controllers {
				m[c] = unified
			}
			return &Hierarchy{V2: true, Mounts: m}, nil
		}
		var missing []string
		for _, c := range V1Controllers {
			if v1[c] == "" {
				missing = append(missing, c)
			}
		}
		return nil, fmt.Errorf("no usable cgroups: the v1 controllers %s are not mounted and the cgroup2 mount at %s does not offer %s (it offers %q)",
			strings.Join(missing, ", "), unified, strings.Join(V2Controllers, ", "), strings.Join(have, " "))
	}
	if len(v1) > 0 {
		var missing []string
		for _, c := range V1Controllers {
			if v1[c] == "" {
				missing = append(missing, c)
			}
		}
		return nil, fmt.Errorf("no usable cgroups: the v1 controllers %s are not mounted, and there is no cgroup2 mount", strings.Join(missing, ", "))
	}
	return nil, errors.New("no cgroup file system is mounted")
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// roots returns the distinct mount points, in a stable order.
func (h *Hierarchy) roots() []string {
	var out []string
	for _, c := range h.controllers() {
		if m := h.Mounts[c]; !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

func (h *Hierarchy) controllers() []string {
	if h.V2 {
		return V2Controllers
	}
	return V1Controllers
}

// Group is one cgroup, present in every hierarchy at the same relative path.
type Group struct {
	h   *Hierarchy
	rel string
}

// Open returns the group at rel without touching the file system.
func (h *Hierarchy) Open(rel string) *Group {
	return &Group{h: h, rel: filepath.Clean("/" + rel)[1:]}
}

// Path returns the group's directory in the hierarchy of controller.
func (g *Group) Path(controller string) string {
	return filepath.Join(g.h.Mounts[controller], g.rel)
}

// Child returns the group name below g.
func (g *Group) Child(name string) *Group { return g.h.Open(g.rel + "/" + name) }

// Create makes the group's directory in every hierarchy. On v2 it also
// enables the controllers for the group's children in every ancestor
// below the mount point.
func (g *Group) Create() error {
	if g.h.V2 {
		if err := g.enableDown(); err != nil {
			return err
		}
	}
	for _, root := range g.h.roots() {
		if err := os.MkdirAll(filepath.Join(root, g.rel), 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", g.rel, err)
		}
	}
	return nil
}

// enableDown makes sure every ancestor of g (below the mount) exists and
// passes the controllers down, as v2 requires.
func (g *Group) enableDown() error {
	root := g.h.Mounts[V2Controllers[0]]
	parts := strings.Split(g.rel, "/")
	dir := root
	for _, p := range parts[:len(parts)-1] {
		if err := EnableControllers(dir); err != nil {
			return err
		}
		dir = filepath.Join(dir, p)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
	}
	return EnableControllers(dir)
}

// EnableControllers writes the controllers into dir's cgroup.subtree_control
// (v2), so that its children get them.
func EnableControllers(dir string) error {
	var b strings.Builder
	for _, c := range V2Controllers {
		fmt.Fprintf(&b, "+%s ", c)
	}
	if err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), strings.TrimSpace(b.String())); err != nil {
		return fmt.Errorf("enable controllers in %s: %w", dir, err)
	}
	return nil
}

// Limits are what a group may use. Zero fields are left unlimited.
type Limits struct {
	MemoryBytes int64
	// CPUs is the quota in cores.
	CPUs float64
	Pids int
}

const cpuPeriod = 100000 // µs

// Set writes the limits. Memory includes no swap.
func (g *Group) Set(l Limits) error {
	var writes [][2]string // controller/file, value
	add := func(ctrl, file, val string) {
		writes = append(writes, [2]string{filepath.Join(g.Path(ctrl), file), val})
	}
	if g.h.V2 {
		if l.MemoryBytes > 0 {
			add("memory", "memory.max", strconv.FormatInt(l.MemoryBytes, 10))
			// memory.swap.max exists only where the kernel has swap.
			if _, err := os.Stat(filepath.Join(g.Path("memory"), "memory.swap.max")); err == nil {
				add("memory", "memory.swap.max", "0")
			}
		}
		if l.CPUs > 0 {
			add("cpu", "cpu.max", fmt.Sprintf("%d %d", int64(l.CPUs*cpuPeriod), cpuPeriod))
		}
		if l.Pids > 0 {
			add("pids", "pids.max", strconv.Itoa(l.Pids))
		}
	} else {
		if l.MemoryBytes > 0 {
			add("memory", "memory.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10))
			// memsw exists only with swap accounting; without it there is no swap to limit.
			if _, err := os.Stat(filepath.Join(g.Path("memory"), "memory.memsw.limit_in_bytes")); err == nil {
				add("memory", "memory.memsw.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10))
			}
			add("memory", "memory.swappiness", "0")
		}
		if l.CPUs > 0 {
			add("cpu", "cpu.cfs_period_us", strconv.Itoa(cpuPeriod))
			add("cpu", "cpu.cfs_quota_us", strconv.FormatInt(int64(l.CPUs*cpuPeriod), 10))
		}
		if l.Pids > 0 {
			add("pids", "pids.max", strconv.Itoa(l.Pids))
		}
	}
	for _, w := range writes {
		if err := writeFile(w[0], w[1]); err != nil {
			return fmt.Errorf("set cgroup limit %s: %w", filepath.Base(w[0]), err)
		}
	}
	return nil
}

// Delegate gives uid/gid the right to create child groups and to move its
// own processes between them, as runc and systemd delegate.
func (g *Group) Delegate(uid, gid int) error {
	files := []string{"cgroup.procs", "tasks"}
	if g.h.V2 {
		files = []string{"cgroup.procs", "cgroup.subtree_control", "cgroup.threads"}
	}
	for _, root := range g.h.roots() {
		dir := filepath.Join(root, g.rel)
		if err := os.Lchown(dir, uid, gid); err != nil {
			return fmt.Errorf("delegate cgroup %s: %w", g.rel, err)
		}
		for _, f := range files {
			if err := os.Lchown(filepath.Join(dir, f), uid, gid); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("delegate cgroup %s: %w", g.rel, err)
			}
		}
	}
	return nil
}

// DelegateProcs lets uid/gid move processes into and out of the group's
// children (v2 checks the common ancestor's cgroup.procs).
func (g *Group) DelegateProcs(uid, gid int) error {
	if !g.h.V2 {
		return nil
	}
	if err := os.Lchown(filepath.Join(g.Path("memory"), "cgroup.procs"), uid, gid); err != nil {
		return fmt.Errorf("delegate cgroup %s: %w", g.rel, err)
	}
	return nil
}

// AddProc moves process pid (and all its threads) into the group.
func (g *Group) AddProc(pid int) error {
	for _, root := range g.h.roots() {
		if err := writeFile(filepath.Join(root, g.rel, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("move process into cgroup %s: %w", g.rel, err)
		}
	}
	return nil
}

// OpenDirs opens the group's directory in each hierarchy, for a process that
// creates child groups on its own (the agent). The order is that of
// Hierarchy.Roots.
func (g *Group) OpenDirs() ([]*os.File, error) {
	var out []*os.File
	for _, root := range g.h.roots() {
		f, err := os.OpenFile(filepath.Join(root, g.rel), os.O_RDONLY|syscallODirectory, 0)
		if err != nil {
			for _, o := range out {
				o.Close()
			}
			return nil, fmt.Errorf("open cgroup %s: %w", g.rel, err)
		}
		out = append(out, f)
	}
	return out, nil
}

// OpenTasks opens the group's "tasks" file in each v1 hierarchy for
// writing, in the order of Roots, for a process that moves its own threads
// in (a thread writes "0" to move itself).
func (g *Group) OpenTasks() ([]*os.File, error) {
	var out []*os.File
	for _, root := range g.h.roots() {
		f, err := os.OpenFile(filepath.Join(root, g.rel, "tasks"), os.O_WRONLY, 0)
		if err != nil {
			for _, o := range out {
				o.Close()
			}
			return nil, fmt.Errorf("open cgroup %s: %w", g.rel, err)
		}
		out = append(out, f)
	}
	return out, nil
}

// Roots lists the hierarchies by their controllers, in the order OpenDirs
// uses: each entry names the controllers mounted there.
func (h *Hierarchy) Roots() [][]string {
	var out [][]string
	for _, root := range h.roots() {
		var cs []string
		for _, c := range h.controllers() {
			if h.Mounts[c] == root {
				cs = append(cs, c)
			}
		}
		out = append(out, cs)
	}
	return out
}

// Exists reports whether the group's directory exists in any hierarchy.
func (g *Group) Exists() bool {
	for _, root := range g.h.roots() {
		if _, err := os.Stat(filepath.Join(root, g.rel)); err == nil {
			return true
		}
	}
	return false
}

// Procs lists the pids in the group and all its descendants, as the
// caller's pid namespace sees them.
func (g *Group) Procs() ([]int, error) {
	var pids []int
	root := g.Path("pids")
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		pids = append(pids, parsePids(b)...)
		return nil
	})
	return pids, err
}

func parsePids(b []byte) []int {
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// Remove deletes the group and its descendants, deepest first. The groups
// must be empty; call Kill first.
func (g *Group) Remove() error {
	var errs []error
	for _, root := range g.h.roots() {
		if err := removeTree(filepath.Join(root, g.rel)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func removeTree(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove cgroup: %w", err)
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := removeTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := rmdir(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	return nil
}

// Children lists the names of the group's child groups.
func (g *Group) Children() ([]string, error) {
	ents, err := os.ReadDir(g.Path(g.h.controllers()[0]))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

func writeFile(path, val string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(val)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
