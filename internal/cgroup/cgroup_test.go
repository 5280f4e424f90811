package cgroup

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The tests in this file run against fake cgroup trees: plain directories
// in t.TempDir(). A real cgroup file system creates a group's control
// files itself; kernelFiles does that here.

// fakeV1 makes a v1 tree, one directory per hierarchy. With comount, cpu
// and cpuacct share the hierarchy "cpu,cpuacct" as systemd mounts them.
func fakeV1(t *testing.T, comount bool) (*Hierarchy, string) {
	t.Helper()
	base := t.TempDir()
	h := &Hierarchy{Mounts: map[string]string{}}
	for _, c := range V1Controllers {
		dir := c
		if comount && (c == "cpu" || c == "cpuacct") {
			dir = "cpu,cpuacct"
		}
		h.Mounts[c] = filepath.Join(base, dir)
		if err := os.MkdirAll(h.Mounts[c], 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, root := range h.roots() {
		writeFiles(t, root, map[string]string{"cgroup.procs": "", "tasks": ""})
	}
	return h, base
}

// fakeV2 makes a unified tree whose root offers the controllers airlock needs.
func fakeV2(t *testing.T) (*Hierarchy, string) {
	t.Helper()
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"cgroup.controllers":     "cpuset cpu io memory hugetlb pids rdma misc\n",
		"cgroup.subtree_control": "",
		"cgroup.procs":           "",
	})
	h := &Hierarchy{V2: true, Mounts: map[string]string{}}
	for _, c := range V2Controllers {
		h.Mounts[c] = root
	}
	return h, root
}

// v1Files are the control files the kernel makes in a new v1 group, per
// controller (the subset airlock touches).
var v1Files = map[string][]string{
	"memory":  {"cgroup.procs", "tasks", "memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.swappiness", "memory.max_usage_in_bytes", "memory.oom_control"},
	"pids":    {"cgroup.procs", "tasks", "pids.max", "pids.events"},
	"cpu":     {"cgroup.procs", "tasks", "cpu.cfs_period_us", "cpu.cfs_quota_us"},
	"cpuacct": {"cgroup.procs", "tasks", "cpuacct.usage"},
	"freezer": {"cgroup.procs", "tasks", "freezer.state"},
}

// v2Files are the control files of a new v2 group with memory, pids and cpu.
var v2Files = []string{"cgroup.procs", "cgroup.threads", "cgroup.subtree_control", "cgroup.controllers", "cgroup.kill",
	"memory.max", "memory.swap.max", "memory.peak", "memory.events", "cpu.max", "cpu.stat", "pids.max", "pids.events"}

// kernelFiles makes g's control files as the kernel would, empty, except
// those named in skip.
func kernelFiles(t *testing.T, g *Group, skip ...string) {
	t.Helper()
	if g.h.V2 {
		for _, f := range v2Files {
			if !slices.Contains(skip, f) {
				writeFiles(t, g.Path("memory"), map[string]string{f: ""})
			}
		}
		return
	}
	for c, files := range v1Files {
		for _, f := range files {
			if !slices.Contains(skip, f) {
				writeFiles(t, g.Path(c), map[string]string{f: ""})
			}
		}
	}
}

// mkGroup makes g's directory in every hierarchy, without Create's v2
// bookkeeping (which needs the kernel's control files in the ancestors).
func mkGroup(t *testing.T, g *Group) {
	t.Helper()
	for _, root := range g.h.roots() {
		if err := os.MkdirAll(filepath.Join(root, g.rel), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// listTree lists every path below dir, relative, directories with a
// trailing slash.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		if d.IsDir() {
			rel += "/"
		}
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestOpen(t *testing.T) {
	h := &Hierarchy{Mounts: map[string]string{"memory": "/cg/memory", "pids": "/cg/pids", "cpu": "/cg/cpu,cpuacct", "cpuacct": "/cg/cpu,cpuacct", "freezer": "/cg/freezer"}}
	tests := []struct {
		rel, ctrl, want string
	}{
		{"airlock/sb-1", "memory", "/cg/memory/airlock/sb-1"},
		{"/airlock/sb-1/", "pids", "/cg/pids/airlock/sb-1"},
		{"airlock//sb-1/./workload", "cpuacct", "/cg/cpu,cpuacct/airlock/sb-1/workload"},
		{"", "freezer", "/cg/freezer"},
		// ".." cannot climb out of the hierarchy.
		{"../../etc", "memory", "/cg/memory/etc"},
		{"airlock/../../../x", "cpu", "/cg/cpu,cpuacct/x"},
	}
	for _, tt := range tests {
		if got := h.Open(tt.rel).Path(tt.ctrl); got != tt.want {
			t.Errorf("Open(%q).Path(%q) = %q, want %q", tt.rel, tt.ctrl, got, tt.want)
		}
	}
	if got := h.Open("airlock").Child("sb-1").Child("agent").Path("memory"); got != "/cg/memory/airlock/sb-1/agent" {
		t.Errorf("Child path = %q", got)
	}
	if got := h.Open("").Child("airlock").Path("pids"); got != "/cg/pids/airlock" {
		t.Errorf("Child of the root = %q", got)
	}
}

func TestRoots(t *testing.T) {
	t.Run("v1 separate", func(t *testing.T) {
		h, base := fakeV1(t, false)
		want := [][]string{{"memory"}, {"pids"}, {"cpu"}, {"cpuacct"}, {"freezer"}}
		if got := h.Roots(); !reflect.DeepEqual(got, want) {
			t.Errorf("Roots() = %v, want %v", got, want)
		}
		checkOpenDirs(t, h, []string{filepath.Join(base, "memory/g"), filepath.Join(base, "pids/g"), filepath.Join(base, "cpu/g"), filepath.Join(base, "cpuacct/g"), filepath.Join(base, "freezer/g")})
	})
	t.Run("v1 co-mounted", func(t *testing.T) {
		h, base := fakeV1(t, true)
		want := [][]string{{"memory"}, {"pids"}, {"cpu", "cpuacct"}, {"freezer"}}
		if got := h.Roots(); !reflect.DeepEqual(got, want) {
			t.Errorf("Roots() = %v, want %v", got, want)
		}
		checkOpenDirs(t, h, []string{filepath.Join(base, "memory/g"), filepath.Join(base, "pids/g"), filepath.Join(base, "cpu,cpuacct/g"), filepath.Join(base, "freezer/g")})
	})
	t.Run("v2", func(t *testing.T) {
		h, root := fakeV2(t)
		want := [][]string{{"memory", "pids", "cpu"}}
		if got := h.Roots(); !reflect.DeepEqual(got, want) {
			t.Errorf("Roots() = %v, want %v", got, want)
		}
		checkOpenDirs(t, h, []string{filepath.Join(root, "g")})
	})
}

// checkOpenDirs creates group g and checks that OpenDirs opens want, in order.
func checkOpenDirs(t *testing.T, h *Hierarchy, want []string) {
	t.Helper()
	g := h.Open("g")
	if _, err := g.OpenDirs(); err == nil {
		t.Error("OpenDirs of a missing group succeeded")
	}
	if err := g.Create(); err != nil {
		t.Fatal(err)
	}
	fs, err := g.OpenDirs()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fs {
		got = append(got, f.Name())
		fi, err := f.Stat()
		if err != nil || !fi.IsDir() {
			t.Errorf("%s is not an open directory: %v", f.Name(), err)
		}
		f.Close()
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("OpenDirs() = %v, want %v", got, want)
	}
}

func TestCreateV1(t *testing.T) {
	for _, comount := range []bool{false, true} {
		name := "separate"
		if comount {
			name = "co-mounted"
		}
		t.Run(name, func(t *testing.T) {
			h, base := fakeV1(t, comount)
			before := listTree(t, base)
			g := h.Open("airlock/sb-1/workload")
			if g.Exists() {
				t.Fatal("Exists() before Create")
			}
			if err := g.Create(); err != nil {
				t.Fatalf("Create: %v", err)
			}
			if !g.Exists() {
				t.Error("Exists() = false after Create")
			}
			var want []string
			want = append(want, before...)
			for _, root := range h.roots() {
				r, _ := filepath.Rel(base, root)
				want = append(want, r+"/airlock/", r+"/airlock/sb-1/", r+"/airlock/sb-1/workload/")
			}
			slices.Sort(want)
			got := listTree(t, base)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("tree after Create:\n got %q\nwant %q", got, want)
			}
			if comount && slices.Contains(got, "cpuacct/") {
				t.Error("a separate cpuacct hierarchy was made on a co-mounted host")
			}
			// v1 writes nothing: no subtree_control exists there.
			for _, root := range h.roots() {
				if s := readFile(t, filepath.Join(root, "cgroup.procs")); s != "" {
					t.Errorf("%s/cgroup.procs = %q", root, s)
				}
			}
			// Create is idempotent.
			if err := g.Create(); err != nil {
				t.Errorf("second Create: %v", err)
			}
		})
	}
}

func TestCreateV2(t *testing.T) {
	h, root := fakeV2(t)
	const enable = "+memory +pids +cpu"

	parent := h.Open("airlock")
	if err := parent.Create(); err != nil {
		t.Fatalf("Create(airlock): %v", err)
	}
	if got := readFile(t, filepath.Join(root, "cgroup.subtree_control")); got != enable {
		t.Errorf("root cgroup.subtree_control = %q, want %q", got, enable)
	}
	if fi, err := os.Stat(filepath.Join(root, "airlock")); err != nil || !fi.IsDir() {
		t.Fatalf("airlock not created: %v", err)
	}
	kernelFiles(t, parent)

	g := h.Open("airlock/sb-1")
	if err := g.Create(); err != nil {
		t.Fatalf("Create(airlock/sb-1): %v", err)
	}
	if got := readFile(t, filepath.Join(root, "airlock", "cgroup.subtree_control")); got != enable {
		t.Errorf("airlock/cgroup.subtree_control = %q, want %q", got, enable)
	}
	if _, err := os.Stat(filepath.Join(root, "airlock", "sb-1")); err != nil {
		t.Fatalf("airlock/sb-1 not created: %v", err)
	}
	// The new group's own subtree_control is its children's business.
	if _, err := os.Stat(filepath.Join(root, "airlock", "sb-1", "cgroup.subtree_control")); err == nil {
		t.Error("Create wrote the new group's own cgroup.subtree_control")
	}
	kernelFiles(t, g)

	// Deeper: every ancestor below the mount passes the controllers down.
	writeFiles(t, root, map[string]string{"cgroup.subtree_control": "", "airlock/cgroup.subtree_control": "", "airlock/sb-1/cgroup.subtree_control": ""})
	w := g.Child("workload")
	if err := w.Create(); err != nil {
		t.Fatalf("Create(workload): %v", err)
	}
	for _, dir := range []string{"", "airlock", "airlock/sb-1"} {
		if got := readFile(t, filepath.Join(root, dir, "cgroup.subtree_control")); got != enable {
			t.Errorf("%s/cgroup.subtree_control = %q, want %q", dir, got, enable)
		}
	}
}

func TestCreateV2Errors(t *testing.T) {
	h, root := fakeV2(t)
	if err := os.Remove(filepath.Join(root, "cgroup.subtree_control")); err != nil {
		t.Fatal(err)
	}
	err := h.Open("airlock").Create()
	if err == nil || !strings.Contains(err.Error(), "enable controllers in "+root) {
		t.Errorf("Create without subtree_control = %v, want an error naming %s", err, root)
	}
	if _, serr := os.Stat(filepath.Join(root, "airlock")); serr == nil {
		t.Error("the group was made although its controllers could not be enabled")
	}
}

func TestEnableControllers(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"cgroup.subtree_control": "old content that is longer"})
	if err := EnableControllers(dir); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(dir, "cgroup.subtree_control")); got != "+memory +pids +cpu" {
		t.Errorf("cgroup.subtree_control = %q", got)
	}
	if err := EnableControllers(filepath.Join(dir, "missing")); err == nil {
		t.Error("EnableControllers on a missing group succeeded")
	}
}

func TestSetV1(t *testing.T) {
	tests := []struct {
		name    string
		comount bool
		noMemsw bool
		limits  Limits
		// want maps controller/file to the value written; files not
		// listed must stay empty.
		want map[string]string
	}{
		{
			name:   "all limits",
			limits: Limits{MemoryBytes: 64 << 20, CPUs: 0.5, Pids: 16},
			want: map[string]string{
				"memory/memory.limit_in_bytes": "67108864", "memory/memory.memsw.limit_in_bytes": "67108864",
				"memory/memory.swappiness": "0", "cpu/cpu.cfs_period_us": "100000", "cpu/cpu.cfs_quota_us": "50000",
				"pids/pids.max": "16",
			},
		},
		{
			name:    "co-mounted cpu,cpuacct",
			comount: true,
			limits:  Limits{CPUs: 1.5},
			want:    map[string]string{"cpu/cpu.cfs_period_us": "100000", "cpu/cpu.cfs_quota_us": "150000"},
		},
		{
			name:    "no swap accounting: memsw is not made up",
			noMemsw: true,
			limits:  Limits{MemoryBytes: 4 << 20},
			want:    map[string]string{"memory/memory.limit_in_bytes": "4194304", "memory/memory.swappiness": "0"},
		},
		{
			name:   "smallest cpu quota",
			limits: Limits{CPUs: 0.01},
			want:   map[string]string{"cpu/cpu.cfs_period_us": "100000", "cpu/cpu.cfs_quota_us": "1000"},
		},
		{
			name:   "several cores",
			limits: Limits{CPUs: 4},
			want:   map[string]string{"cpu/cpu.cfs_period_us": "100000", "cpu/cpu.cfs_quota_us": "400000"},
		},
		{
			name:   "pids only",
			limits: Limits{Pids: 64},
			want:   map[string]string{"pids/pids.max": "64"},
		},
		{
			name:   "zero limits write nothing",
			limits: Limits{},
			want:   map[string]string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := fakeV1(t, tt.comount)
			g := h.Open("airlock/sb/workload")
			if err := g.Create(); err != nil {
				t.Fatal(err)
			}
			var skip []string
			if tt.noMemsw {
				skip = append(skip, "memory.memsw.limit_in_bytes")
			}
			kernelFiles(t, g, skip...)
			if err := g.Set(tt.limits); err != nil {
				t.Fatalf("Set: %v", err)
			}
			for c, files := range v1Files {
				for _, f := range files {
					p := filepath.Join(g.Path(c), f)
					b, err := os.ReadFile(p)
					if errors.Is(err, fs.ErrNotExist) && slices.Contains(skip, f) {
						continue
					}
					if err != nil {
						t.Errorf("%s: %v", p, err)
						continue
					}
					key := c + "/" + f
					if c == "cpuacct" && tt.comount {
						key = "cpu/" + f // the same file as cpu's
					}
					if got, want := string(b), tt.want[key]; got != want {
						t.Errorf("%s = %q, want %q", key, got, want)
					}
				}
			}
			if tt.noMemsw {
				if _, err := os.Stat(filepath.Join(g.Path("memory"), "memory.memsw.limit_in_bytes")); err == nil {
					t.Error("Set created memory.memsw.limit_in_bytes")
				}
			}
		})
	}
}

func TestSetV2(t *testing.T) {
	tests := []struct {
		name   string
		skip   []string // control files the kernel does not offer
		limits Limits
		want   map[string]string
	}{
		{
			name:   "all limits",
			limits: Limits{MemoryBytes: 64 << 20, CPUs: 0.5, Pids: 16},
			want:   map[string]string{"memory.max": "67108864", "memory.swap.max": "0", "cpu.max": "50000 100000", "pids.max": "16"},
		},
		{
			name:   "two cores",
			limits: Limits{CPUs: 2},
			want:   map[string]string{"cpu.max": "200000 100000"},
		},
		{
			name:   "zero limits write nothing",
			limits: Limits{},
			want:   map[string]string{},
		},
		{
			// A kernel without swap (CONFIG_SWAP=n, or swap accounting
			// off) has no memory.swap.max; then there is no swap to limit,
			// as Set already knows for v1's memsw.
			name:   "no swap accounting",
			skip:   []string{"memory.swap.max"},
			limits: Limits{MemoryBytes: 64 << 20},
			want:   map[string]string{"memory.max": "67108864"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := fakeV2(t)
			g := h.Open("sb")
			if err := g.Create(); err != nil {
				t.Fatal(err)
			}
			kernelFiles(t, g, tt.skip...)
			if err := g.Set(tt.limits); err != nil {
				t.Fatalf("Set: %v", err)
			}
			for _, f := range v2Files {
				if slices.Contains(tt.skip, f) {
					if _, err := os.Stat(filepath.Join(g.Path("memory"), f)); err == nil {
						t.Errorf("Set created %s", f)
					}
					continue
				}
				if got, want := readFile(t, filepath.Join(g.Path("memory"), f)), tt.want[f]; got != want {
					t.Errorf("%s = %q, want %q", f, got, want)
				}
			}
		})
	}
}

func TestSetErrors(t *testing.T) {
	t.Run("v1 missing pids.max", func(t *testing.T) {
		h, _ := fakeV1(t, false)
		g := h.Open("g")
		if err := g.Create(); err != nil {
			t.Fatal(err)
		}
		kernelFiles(t, g, "pids.max")
		err := g.Set(Limits{Pids: 10})
		if err == nil || !strings.Contains(err.Error(), "set cgroup limit pids.max") {
			t.Errorf("Set = %v, want an error naming pids.max", err)
		}
	})
	t.Run("v2 group missing", func(t *testing.T) {
		h, _ := fakeV2(t)
		err := h.Open("nope").Set(Limits{MemoryBytes: 8 << 20})
		if err == nil || !strings.Contains(err.Error(), "memory.max") {
			t.Errorf("Set = %v, want an error naming memory.max", err)
		}
	})
}

func TestAddProc(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) *Hierarchy
		roots int
	}{
		{"v1 separate", func(t *testing.T) *Hierarchy { h, _ := fakeV1(t, false); return h }, 5},
		{"v1 co-mounted", func(t *testing.T) *Hierarchy { h, _ := fakeV1(t, true); return h }, 4},
		{"v2", func(t *testing.T) *Hierarchy { h, _ := fakeV2(t); return h }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.setup(t)
			g := h.Open("airlock/sb/agent")
			if err := g.AddProc(4242); err == nil {
				t.Error("AddProc into a missing group succeeded")
			} else if !strings.Contains(err.Error(), "move process into cgroup airlock/sb/agent") {
				t.Errorf("AddProc error = %v", err)
			}
			mkGroup(t, g)
			kernelFiles(t, g)
			if err := g.AddProc(4242); err != nil {
				t.Fatalf("AddProc: %v", err)
			}
			if len(h.roots()) != tc.roots {
				t.Fatalf("%d hierarchies, want %d", len(h.roots()), tc.roots)
			}
			for _, root := range h.roots() {
				if got := readFile(t, filepath.Join(root, "airlock/sb/agent/cgroup.procs")); got != "4242" {
					t.Errorf("%s cgroup.procs = %q, want 4242", root, got)
				}
				// Not the ancestors.
				if got := readFile(t, filepath.Join(root, "cgroup.procs")); got != "" {
					t.Errorf("%s root cgroup.procs = %q", root, got)
				}
			}
		})
	}
}

func TestStats(t *testing.T) {
	tests := []struct {
		name  string
		v2    bool
		files map[string]string // controller/file (v1) or file (v2)
		want  Stats
	}{
		{
			name: "v1",
			files: map[string]string{
				"memory/memory.max_usage_in_bytes": "1048576\n",
				"memory/memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
				"cpuacct/cpuacct.usage":            "123456789\n",
				"pids/pids.events":                 "max 7\n",
			},
			want: Stats{MemoryPeak: 1 << 20, OOMKills: 3, CPUNanos: 123456789, PidsMax: 7},
		},
		{
			name: "v1 nothing happened",
			files: map[string]string{
				"memory/memory.max_usage_in_bytes": "0\n",
				"memory/memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
				"cpuacct/cpuacct.usage":            "0\n",
				"pids/pids.events":                 "max 0\n",
			},
			want: Stats{},
		},
		{
			name: "v1 old kernel without oom_kill",
			files: map[string]string{
				"memory/memory.oom_control": "oom_kill_disable 0\nunder_oom 1\n",
			},
			want: Stats{},
		},
		{
			name: "v2",
			v2:   true,
			files: map[string]string{
				"memory.peak":   "2097152\n",
				"memory.events": "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n",
				"cpu.stat":      "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n",
				"pids.events":   "max 4\n",
			},
			want: Stats{MemoryPeak: 2 << 20, OOMKills: 1, CPUNanos: 1500000, PidsMax: 4},
		},
		{
			name:  "v2 without memory.peak (before Linux 5.19)",
			v2:    true,
			files: map[string]string{"memory.events": "oom 0\noom_kill 0\n", "cpu.stat": "usage_usec 7\n"},
			want:  Stats{CPUNanos: 7000},
		},
		{
			name:  "v1 nothing to read",
			files: map[string]string{},
			want:  Stats{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h *Hierarchy
			if tt.v2 {
				h, _ = fakeV2(t)
			} else {
				h, _ = fakeV1(t, false)
			}
			g := h.Open("sb")
			if err := g.Create(); err != nil {
				t.Fatal(err)
			}
			for name, content := range tt.files {
				p := filepath.Join(g.Path("memory"), name)
				if !tt.v2 {
					c, f, _ := strings.Cut(name, "/")
					p = filepath.Join(g.Path(c), f)
				}
				writeFiles(t, filepath.Dir(p), map[string]string{filepath.Base(p): content})
			}
			got, err := g.Stats()
			if err != nil {
				t.Fatalf("Stats: %v", err)
			}
			if got != tt.want {
				t.Errorf("Stats() = %+v, want %+v", got, tt.want)
			}
			ns, err := g.CPUNanos()
			if tt.want.CPUNanos != 0 && (err != nil || ns != tt.want.CPUNanos) {
				t.Errorf("CPUNanos() = %d, %v, want %d", ns, err, tt.want.CPUNanos)
			}
		})
	}
}

func TestStatsErrors(t *testing.T) {
	h, _ := fakeV1(t, false)
	g := h.Open("sb")
	if err := g.Create(); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, g.Path("pids"), map[string]string{"pids.events": "max 2\n"})
	// A directory where a counter should be: read fails with EISDIR.
	if err := os.Mkdir(filepath.Join(g.Path("memory"), "memory.max_usage_in_bytes"), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := g.Stats()
	if err == nil {
		t.Error("Stats with an unreadable counter returned no error")
	}
	if s.PidsMax != 2 {
		t.Errorf("the readable counters were not read: %+v", s)
	}
	if _, err := g.CPUNanos(); err == nil {
		t.Error("CPUNanos without cpuacct.usage returned no error")
	}
}

func TestKeyed(t *testing.T) {
	b := []byte("oom_kill_disable 1\nunder_oom 0\noom_kill 5\nmax 9\nmax.imposed 3\n")
	for key, want := range map[string]int64{"oom_kill": 5, "oom_kill_disable": 1, "max": 9, "max.imposed": 3, "missing": 0, "oom": 0} {
		if got := keyed(b, key); got != want {
			t.Errorf("keyed(%q) = %d, want %d", key, got, want)
		}
	}
	for in, want := range map[string]int64{"42\n": 42, " 7 ": 7, "": 0, "max\n": 0, "-1": -1} {
		if got := parseInt([]byte(in)); got != want {
			t.Errorf("parseInt(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestProcs(t *testing.T) {
	for _, v2 := range []bool{false, true} {
		name := "v1"
		if v2 {
			name = "v2"
		}
		t.Run(name, func(t *testing.T) {
			var h *Hierarchy
			if v2 {
				h, _ = fakeV2(t)
			} else {
				h, _ = fakeV1(t, true)
			}
			g := h.Open("airlock/sb")
			if pids, err := g.Procs(); err != nil || len(pids) != 0 {
				t.Errorf("Procs of a missing group = %v, %v, want none", pids, err)
			}
			writeFiles(t, g.Path("pids"), map[string]string{
				"cgroup.procs":                  "1\n2\n",
				"agent/cgroup.procs":            "3\n",
				"workload/cgroup.procs":         "",
				"workload/x1/cgroup.procs":      "4\n5\n6\n",
				"workload/x2/cgroup.procs":      "7",
				"workload/x2/deep/cgroup.procs": "8\n",
				"workload/x3/notes":             "9\n", // no cgroup.procs: skipped
			})
			// The other hierarchies are not read.
			if !v2 {
				writeFiles(t, g.Path("memory"), map[string]string{"cgroup.procs": "99\n"})
			}
			// An ancestor's processes are not the group's.
			writeFiles(t, h.Open("airlock").Path("pids"), map[string]string{"cgroup.procs": "100\n"})
			pids, err := g.Procs()
			if err != nil {
				t.Fatalf("Procs: %v", err)
			}
			slices.Sort(pids)
			if want := []int{1, 2, 3, 4, 5, 6, 7, 8}; !reflect.DeepEqual(pids, want) {
				t.Errorf("Procs() = %v, want %v", pids, want)
			}
			sub, err := g.Child("workload").Procs()
			slices.Sort(sub)
			if want := []int{4, 5, 6, 7, 8}; err != nil || !reflect.DeepEqual(sub, want) {
				t.Errorf("workload Procs() = %v, %v, want %v", sub, err, want)
			}
		})
	}
}

func TestChildren(t *testing.T) {
	h, _ := fakeV1(t, false)
	parent := h.Open("airlock")
	if got, err := parent.Children(); err != nil || got != nil {
		t.Errorf("Children of a missing group = %v, %v, want nil, nil", got, err)
	}
	for _, n := range []string{"sb-2", "sb-1", "sb-3"} {
		if err := parent.Child(n).Create(); err != nil {
			t.Fatal(err)
		}
	}
	if err := parent.Child("sb-1").Child("workload").Create(); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, parent.Path("memory"), map[string]string{"cgroup.procs": "", "memory.limit_in_bytes": ""})
	got, err := parent.Children()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"sb-1", "sb-2", "sb-3"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Children() = %v, want %v (directories only, not grandchildren)", got, want)
	}
	// Empty group.
	got, err = parent.Child("sb-2").Children()
	if err != nil || len(got) != 0 {
		t.Errorf("Children of a leaf = %v, %v", got, err)
	}
}
