package gvisor

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// testBundle is a bundle with the default limits and a composed root.
func testBundle(l sandbox.Limits, mounts ...sandbox.Mount) bundle {
	l = l.WithDefaults()
	return bundle{
		Rootfs:      "/run/airlock/gvisor/bundles/sb-1/rootfs",
		Binds:       []bind{{Source: "/usr", Target: "/usr"}, {Source: "/etc/ssl", Target: "/etc/ssl"}},
		Mounts:      mounts,
		Agent:       "/run/airlock/agent/airlock-agent-0123456789abcdef",
		CgroupsPath: cgroupsPath("airlock", "sb-1"),
		Limits:      l,
		Host:        hostLimitsFor(l, true),
	}
}

// mountAt returns the spec's mount at dst, failing when there is not
// exactly one.
func mountAt(t *testing.T, s *specs.Spec, dst string) specs.Mount {
	t.Helper()
	var found []specs.Mount
	for _, m := range s.Mounts {
		if m.Destination == dst {
			found = append(found, m)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d mounts at %s, want 1: %+v", len(found), dst, s.Mounts)
	}
	return found[0]
}

func TestSpecLimits(t *testing.T) {
	tests := []struct {
		name       string
		limits     sandbox.Limits
		swap       bool
		wantMemory int64
		wantQuota  int64
		wantPids   int64
		wantTmp    string
		wantDisk   string
	}{
		{
			name:       "defaults",
			swap:       true,
			wantMemory: sandbox.DefaultMemory + hostMemoryExtra, wantQuota: 50000,
			wantPids: sandbox.DefaultPids*hostPidsPerProc + hostPidsBase,
			wantTmp:  "size=67108864", wantDisk: "size=268435456",
		},
		{
			name:       "small",
			limits:     sandbox.Limits{MemoryBytes: 4 << 20, CPUs: 0.01, Pids: 2, DiskBytes: 1 << 20, TmpBytes: 4096},
			wantMemory: 4<<20 + hostMemoryExtra, wantQuota: 1000,
			wantPids: 2*hostPidsPerProc + hostPidsBase,
			wantTmp:  "size=4096", wantDisk: "size=1048576",
		},
		{
			name:       "large, no swap accounting",
			limits:     sandbox.Limits{MemoryBytes: 8 << 30, CPUs: 16, Pids: 4096},
			wantMemory: 8<<30 + hostMemoryExtra, wantQuota: 1600000,
			wantPids: 4096*hostPidsPerProc + hostPidsBase,
			wantTmp:  "size=67108864", wantDisk: "size=268435456",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := tt.limits.WithDefaults()
			b := testBundle(l)
			b.Host = hostLimitsFor(l, tt.swap)
			s := b.spec()
			r := s.Linux.Resources
			if r == nil || r.Memory == nil || r.CPU == nil || r.Pids == nil {
				t.Fatalf("resources incomplete: %+v", r)
			}
			if *r.Memory.Limit != tt.wantMemory {
				t.Errorf("memory limit %d, want %d (the sandbox's plus room for gVisor)", *r.Memory.Limit, tt.wantMemory)
			}
			switch {
			case tt.swap && (r.Memory.Swap == nil || *r.Memory.Swap != tt.wantMemory):
				t.Errorf("swap %v, want memory+swap = memory (no swap)", r.Memory.Swap)
			case !tt.swap && r.Memory.Swap != nil:
				t.Errorf("swap %d set on a host without swap accounting", *r.Memory.Swap)
			}
			if *r.CPU.Quota != tt.wantQuota || *r.CPU.Period != cpuPeriod {
				t.Errorf("cpu quota %d/%d, want %d/%d", *r.CPU.Quota, *r.CPU.Period, tt.wantQuota, cpuPeriod)
			}
			if r.Pids.Limit == nil || *r.Pids.Limit != tt.wantPids || *r.Pids.Limit <= int64(l.Pids) {
				t.Errorf("host pids limit %v, want %d: above the workload's %d, for gVisor's own processes", r.Pids.Limit, tt.wantPids, l.Pids)
			}
			if o := mountAt(t, s, "/tmp").Options; !slices.Contains(o, tt.wantTmp) {
				t.Errorf("/tmp options %q, want %s", o, tt.wantTmp)
			}
			if o := mountAt(t, s, "/dev/shm").Options; !slices.Contains(o, tt.wantTmp) {
				t.Errorf("/dev/shm options %q, want %s", o, tt.wantTmp)
			}
			ws := mountAt(t, s, sandbox.Workspace)
			for _, want := range []string{tt.wantDisk, "uid=1000", "gid=1000", "nosuid", "nodev"} {
				if !slices.Contains(ws.Options, want) {
					t.Errorf("/workspace options %q lack %s", ws.Options, want)
				}
			}
			if ws.Type != "tmpfs" {
				t.Errorf("/workspace is %s, want tmpfs", ws.Type)
			}
		})
	}
}

func TestSpecMounts(t *testing.T) {
	tests := []struct {
		name   string
		mounts []sandbox.Mount
		want   map[string][]string // destination → options it must have
		order  []string            // destinations in this relative order
	}{
		{name: "none", want: map[string][]string{}},
		{
			name:   "read-only by default",
			mounts: []sandbox.Mount{{Source: "/srv/data", Target: "/mnt/data"}},
			want:   map[string][]string{"/mnt/data": {"rbind", "ro", "nosuid", "nodev"}},
		},
		{
			name:   "writable",
			mounts: []sandbox.Mount{{Source: "/srv/out", Target: "/mnt/out", Writable: true}},
			want:   map[string][]string{"/mnt/out": {"rbind", "rw", "nosuid", "nodev"}},
		},
		{
			name: "parents before children",
			mounts: []sandbox.Mount{
				{Source: "/srv/a/b", Target: "/mnt/a/b"},
				{Source: "/srv/a", Target: "/mnt/a", Writable: true},
				{Source: "/srv/file.txt", Target: "/workspace/file.txt"},
			},
			want: map[string][]string{
				"/mnt/a/b": {"ro"}, "/mnt/a": {"rw"}, "/workspace/file.txt": {"ro"},
			},
			order: []string{sandbox.Workspace, "/mnt/a", "/mnt/a/b"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testBundle(sandbox.Limits{}, tt.mounts...).spec()
			for dst, opts := range tt.want {
				m := mountAt(t, s, dst)
				if m.Type != "bind" {
					t.Errorf("%s: type %s, want bind", dst, m.Type)
				}
				for _, o := range opts {
					if !slices.Contains(m.Options, o) {
						t.Errorf("%s: options %q lack %s", dst, m.Options, o)
					}
				}
				if slices.Contains(m.Options, "ro") == slices.Contains(m.Options, "rw") {
					t.Errorf("%s: options %q: want exactly one of ro and rw", dst, m.Options)
				}
			}
			last := -1
			for _, dst := range tt.order {
				i := slices.IndexFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == dst })
				if i <= last {
					t.Errorf("mount %s is out of order: %v", dst, destinations(s))
				}
				last = i
			}
			// Every caller's mount comes after the root's own.
			ws := slices.IndexFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == sandbox.Workspace })
			for _, m := range tt.mounts {
				if i := slices.IndexFunc(s.Mounts, func(sm specs.Mount) bool { return sm.Destination == m.Target }); i < ws {
					t.Errorf("caller's mount %s comes before /workspace: %v", m.Target, destinations(s))
				}
			}
		})
	}
}

func destinations(s *specs.Spec) []string {
	var out []string
	for _, m := range s.Mounts {
		out = append(out, m.Destination)
	}
	return out
}

// TestSpecPosture checks what never varies: the read-only root, the
// composed root's binds, the agent as the one process and how it runs, no
// network namespace shared, the host name.
func TestSpecPosture(t *testing.T) {
	b := testBundle(sandbox.Limits{})
	s := b.spec()
	if s.Version != "1.0.2" {
		t.Errorf("ociVersion %q, want 1.0.2 (the oldest runsc airlock falls back to speaks it)", s.Version)
	}
	if s.Root == nil || !s.Root.Readonly || s.Root.Path != b.Rootfs {
		t.Errorf("root %+v, want %s read-only", s.Root, b.Rootfs)
	}
	if s.Hostname != "sandbox" {
		t.Errorf("hostname %q", s.Hostname)
	}
	for _, bd := range b.Binds {
		m := mountAt(t, s, bd.Target)
		if m.Source != bd.Source || !slices.Contains(m.Options, "ro") || !slices.Contains(m.Options, "nosuid") || !slices.Contains(m.Options, "nodev") {
			t.Errorf("bind %s: %+v, want %s read-only, nosuid, nodev", bd.Target, m, bd.Source)
		}
	}
	for dst, typ := range map[string]string{"/proc": "proc", "/dev": "tmpfs", "/dev/pts": "devpts", "/tmp": "tmpfs", "/dev/shm": "tmpfs"} {
		m := mountAt(t, s, dst)
		if m.Type != typ || !slices.Contains(m.Options, "nosuid") {
			t.Errorf("%s: %+v, want %s, nosuid", dst, m, typ)
		}
	}
	if slices.ContainsFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == "/sys" || strings.HasPrefix(m.Destination, "/sys/") }) {
		t.Errorf("the spec mounts /sys")
	}
	ag := mountAt(t, s, agentDir+"/"+agentName)
	if ag.Source != b.Agent || !slices.Contains(ag.Options, "ro") || !strings.HasPrefix(agentDir, "/tmp/") {
		t.Errorf("agent mount %+v: want %s read-only, below /tmp (whose mount point is the sandbox's own tmpfs)", ag, b.Agent)
	}

	p := s.Process
	if p == nil {
		t.Fatal("no process")
	}
	if p.Terminal {
		t.Errorf("terminal: the agent talks over plain stdio")
	}
	if !slices.Equal(p.Args, []string{agentName, agent.StdioArg}) {
		t.Errorf("args %q", p.Args)
	}
	if !slices.Equal(p.Env, []string{"PATH=" + agentDir}) {
		t.Errorf("env %q: want only the PATH that finds the agent", p.Env)
	}
	if p.User.UID != 0 || p.User.GID != 0 || len(p.User.AdditionalGids) != 0 {
		t.Errorf("user %+v: the agent is root inside gVisor (commands run as 1000)", p.User)
	}
	if !p.NoNewPrivileges {
		t.Errorf("no_new_privs is off")
	}
	c := p.Capabilities
	if c == nil {
		t.Fatal("no capabilities: the agent would get runsc's defaults")
	}
	for _, set := range [][]string{c.Bounding, c.Effective, c.Permitted} {
		if !slices.Equal(set, agent.ContainedCaps) {
			t.Errorf("capabilities %q, want exactly %q", set, agent.ContainedCaps)
		}
	}
	if len(c.Inheritable) != 0 || len(c.Ambient) != 0 {
		t.Errorf("inheritable %q, ambient %q: a command must inherit nothing", c.Inheritable, c.Ambient)
	}
	for _, never := range []string{"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_SYS_PTRACE", "CAP_SYS_MODULE", "CAP_MKNOD", "CAP_SETFCAP"} {
		if slices.Contains(c.Bounding, never) {
			t.Errorf("the agent has %s", never)
		}
	}

	var kinds []specs.LinuxNamespaceType
	for _, ns := range s.Linux.Namespaces {
		if ns.Path != "" {
			t.Errorf("namespace %s joins %s: every namespace must be new", ns.Type, ns.Path)
		}
		kinds = append(kinds, ns.Type)
	}
	for _, want := range []specs.LinuxNamespaceType{specs.PIDNamespace, specs.NetworkNamespace, specs.IPCNamespace, specs.UTSNamespace, specs.MountNamespace} {
		if !slices.Contains(kinds, want) {
			t.Errorf("namespaces %v lack %s", kinds, want)
		}
	}
	if s.Linux.CgroupsPath != "/airlock/sb-1" {
		t.Errorf("cgroupsPath %q", s.Linux.CgroupsPath)
	}
	// The spec is what runsc reads: it must survive JSON.
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back specs.Spec
	if err := json.Unmarshal(raw, &back); err != nil || back.Process.Capabilities == nil || !back.Root.Readonly {
		t.Errorf("the spec does not round-trip through JSON: %v", err)
	}
}

func TestAgentConfig(t *testing.T) {
	spec := sandbox.Spec{Env: []string{"A=b"}, Limits: sandbox.Limits{Pids: 7, DiskBytes: 1 << 20, TmpBytes: 2 << 20, OpenFiles: 99, Timeout: time.Second}.WithDefaults()}
	cfg := agentConfig(spec)
	if cfg.Contained == nil || cfg.Contained.Pids != 7 || cfg.Contained.AgentMount != agentDir+"/"+agentName {
		t.Errorf("contained config %+v: want the workload's pids limit and the agent's mount", cfg.Contained)
	}
	if cfg.Pids != 0 {
		t.Errorf("RLIMIT_NPROC %d: inside gVisor the cgroup holds the limit", cfg.Pids)
	}
	if cfg.UID != 1000 || cfg.GID != 1000 || cfg.Hostname != "sandbox" || cfg.OpenFiles != 99 || cfg.DiskBytes != 1<<20 || cfg.TmpBytes != 2<<20 || !slices.Equal(cfg.Env, spec.Env) {
		t.Errorf("config %+v", cfg)
	}
	if cfg.Root != 0 || len(cfg.Mounts) != 0 || len(cfg.Cgroup.FDs) != 0 || len(cfg.AgentTasks) != 0 {
		t.Errorf("config %+v names host descriptors: runsc passes none", cfg)
	}
}

// TestSpecHidden: airlock's own directories of /usr are covered, after the
// /usr bind, by empty read-only tmpfs mounts.
func TestSpecHidden(t *testing.T) {
	b := testBundle(sandbox.Limits{})
	b.Hidden = []string{"/usr/lib/airlock", "/usr/share/doc/airlock"}
	s := b.spec()
	usr := slices.IndexFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == "/usr" })
	for _, h := range b.Hidden {
		i := slices.IndexFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == h })
		if i < 0 || i < usr {
			t.Fatalf("%s is not mounted after /usr: %v", h, destinations(s))
		}
		m := s.Mounts[i]
		if m.Type != "tmpfs" || !slices.Contains(m.Options, "ro") || !slices.Contains(m.Options, "noexec") {
			t.Errorf("%s: %+v, want an empty read-only tmpfs", h, m)
		}
	}
}
