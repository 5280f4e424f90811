package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/hostcap"
)

// layersWith returns a result for every capability: those in okNames work,
// the others are missing with a Why and Fix naming them.
func layersWith(okNames ...string) []hostcap.Result {
	var rs []hostcap.Result
	for _, n := range hostcap.Names {
		if slices.Contains(okNames, n) {
			rs = append(rs, hostcap.Result{Name: n, OK: true, Detail: n + " works"})
			continue
		}
		rs = append(rs, hostcap.Result{Name: n, Why: n + " is broken", Fix: "fix " + n})
	}
	return rs
}

func driver(t *testing.T, ds []DriverStatus, name string) DriverStatus {
	t.Helper()
	i := slices.IndexFunc(ds, func(d DriverStatus) bool { return d.Name == name })
	if i < 0 {
		t.Fatalf("no driver %q in %+v", name, ds)
	}
	return ds[i]
}

func TestDrivers(t *testing.T) {
	tests := []struct {
		name      string
		layers    []hostcap.Result
		driver    string
		wantOK    bool
		wantNote  string
		wantWhy   []string
		wantFix   []string
		wantNeeds []string
	}{
		{
			name: "native with cgroup v1", layers: layersWith("root", "userns", "cgroupv1", "seccomp", "landlock"),
			driver: "native", wantOK: true,
			wantNeeds: []string{"root", "userns", "cgroupv1|cgroupv2", "seccomp", "landlock"},
		},
		{
			name: "native with cgroup v2", layers: layersWith("root", "userns", "cgroupv2", "seccomp", "landlock"),
			driver: "native", wantOK: true,
		},
		{
			name: "native without any cgroups", layers: layersWith("root", "userns", "seccomp", "landlock"),
			driver: "native", wantOK: false,
			wantWhy: []string{"cgroupv1: cgroupv1 is broken", "cgroupv2: cgroupv2 is broken"},
			wantFix: []string{"fix cgroupv1", "fix cgroupv2"},
		},
		{
			name: "native without root or landlock", layers: layersWith("userns", "cgroupv1", "seccomp"),
			driver: "native", wantOK: false,
			wantWhy: []string{"root: root is broken", "landlock: landlock is broken"},
			wantFix: []string{"fix root", "fix landlock"},
		},
		{
			name: "gvisor", layers: layersWith("root", "cgroupv1", "runsc"), driver: "gvisor", wantOK: true,
			wantNeeds: []string{"root", "cgroupv1|cgroupv2", "runsc"}, wantNote: "runsc works",
		},
		{
			name: "gvisor without runsc", layers: layersWith("root", "cgroupv2"), driver: "gvisor",
			wantWhy: []string{"runsc: runsc is broken"}, wantFix: []string{"fix runsc"},
		},
		{
			name: "gvisor without root", layers: layersWith("cgroupv1", "runsc"), driver: "gvisor",
			wantWhy: []string{"root: root is broken"}, wantFix: []string{"fix root"},
		},
		{
			name: "microvm with kvm", layers: layersWith("kvm", "qemu"), driver: "microvm", wantOK: true,
			wantNote: "hardware virtualization (KVM)",
		},
		{
			name: "microvm under TCG", layers: layersWith("qemu"), driver: "microvm", wantOK: true,
			wantNote: "software emulation (TCG): slow; kvm: kvm is broken",
		},
		{
			name: "microvm without qemu", layers: layersWith("kvm"), driver: "microvm",
			wantWhy: []string{"qemu: qemu is broken"}, wantFix: []string{"fix qemu"},
		},
		{
			name: "docker", layers: layersWith("docker"), driver: "docker", wantOK: true,
		},
		{
			name: "docker missing", layers: layersWith(), driver: "docker",
			wantWhy: []string{"docker: docker is broken"}, wantFix: []string{"fix docker"},
		},
		{
			name: "wasm needs nothing", layers: nil, driver: "wasm", wantOK: true, wantNote: "in-process", wantNeeds: []string{},
		},
		{
			name: "layer not probed", layers: nil, driver: "gvisor",
			wantWhy: []string{"runsc: not probed"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := drivers(tt.layers)
			if len(ds) != len(driverNeeds) {
				t.Fatalf("drivers() returned %d, want %d", len(ds), len(driverNeeds))
			}
			d := driver(t, ds, tt.driver)
			if d.OK != tt.wantOK {
				t.Fatalf("%s OK = %v, want %v (%+v)", tt.driver, d.OK, tt.wantOK, d)
			}
			if !strings.Contains(d.Note, tt.wantNote) {
				t.Errorf("Note = %q, want it to contain %q", d.Note, tt.wantNote)
			}
			if d.OK && (d.Why != "" || d.Fix != "") {
				t.Errorf("working driver has Why %q / Fix %q", d.Why, d.Fix)
			}
			for _, w := range tt.wantWhy {
				if !strings.Contains(d.Why, w) {
					t.Errorf("Why = %q, want it to contain %q", d.Why, w)
				}
			}
			for _, f := range tt.wantFix {
				if !strings.Contains(d.Fix, f) {
					t.Errorf("Fix = %q, want it to contain %q", d.Fix, f)
				}
			}
			if tt.wantNeeds != nil && !slices.Equal(d.Needs, tt.wantNeeds) {
				t.Errorf("Needs = %q, want %q", d.Needs, tt.wantNeeds)
			}
		})
	}
}

// rowPattern matches a table row: indented name, status, detail.
var rowPattern = regexp.MustCompile(`^  (\S+) +(ok|missing)\b`)

// rows parses the section of a text report that starts with header.
func rows(t *testing.T, text, header string) map[string]struct {
	ok       bool
	why, fix bool
} {
	t.Helper()
	_, section, found := strings.Cut(text, "\n"+header+"\n")
	if !found {
		t.Fatalf("no %q section in:\n%s", header, text)
	}
	section, _, _ = strings.Cut(section, "\n\n")
	out := map[string]struct {
		ok       bool
		why, fix bool
	}{}
	last := ""
	for _, line := range strings.Split(section, "\n") {
		if m := rowPattern.FindStringSubmatch(line); m != nil {
			last = m[1]
			out[last] = struct {
				ok       bool
				why, fix bool
			}{ok: m[2] == "ok"}
			continue
		}
		e := out[last]
		switch trimmed := strings.TrimSpace(line); {
		case strings.HasPrefix(trimmed, "why: "):
			e.why = true
		case strings.HasPrefix(trimmed, "fix: "):
			e.fix = true
		case trimmed != "":
			t.Errorf("unexpected line in %s: %q", header, line)
		}
		out[last] = e
	}
	return out
}

func TestRun(t *testing.T) {
	r := Run(context.Background())

	t.Run("host", func(t *testing.T) {
		h := r.Host
		if h.Arch != runtime.GOARCH || h.Cores != runtime.NumCPU() || h.GoVersion != runtime.Version() {
			t.Errorf("Host = %+v, want arch %s, %d cores, %s", h, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
		}
		if h.CgroupMode != hostcap.CgroupMode() {
			t.Errorf("CgroupMode = %q, want %q", h.CgroupMode, hostcap.CgroupMode())
		}
		if runtime.GOOS == "linux" && (h.Kernel == "" || h.MemoryBytes == 0 || h.OS == "") {
			t.Errorf("Host = %+v, want kernel, OS and memory on Linux", h)
		}
	})

	t.Run("layers and drivers", func(t *testing.T) {
		var names []string
		for _, l := range r.Layers {
			names = append(names, l.Name)
		}
		if !slices.Equal(names, hostcap.Names) {
			t.Errorf("layers %v, want %v", names, hostcap.Names)
		}
		var ds []string
		for _, d := range r.Drivers {
			ds = append(ds, d.Name)
		}
		if want := []string{"native", "gvisor", "microvm", "docker", "wasm"}; !slices.Equal(ds, want) {
			t.Errorf("drivers %v, want %v", ds, want)
		}
	})

	t.Run("text", func(t *testing.T) {
		var buf bytes.Buffer
		if err := r.WriteText(&buf); err != nil {
			t.Fatalf("WriteText: %v", err)
		}
		text := buf.String()
		t.Logf("\n%s", text)
		check := func(header, name string, ok bool, why, fix string) {
			got, found := rows(t, text, header)[name]
			if !found {
				t.Errorf("%s: no line for %s", header, name)
				return
			}
			if got.ok != ok {
				t.Errorf("%s: %s shows ok=%v, want %v", header, name, got.ok, ok)
			}
			if got.why != (!ok && why != "") || got.fix != (!ok && fix != "") {
				t.Errorf("%s: %s has why line %v, fix line %v; want them for each missing thing", header, name, got.why, got.fix)
			}
		}
		for _, l := range r.Layers {
			check("layers", l.Name, l.OK, l.Why, l.Fix)
		}
		for _, d := range r.Drivers {
			check("drivers", d.Name, d.OK, d.Why, d.Fix)
		}
	})

	t.Run("json", func(t *testing.T) {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		var back Report
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("Unmarshal: %v", err)
		}
		if !reflect.DeepEqual(back, r) {
			t.Errorf("JSON round trip changed the report:\n got %+v\nwant %+v", back, r)
		}
		var host struct {
			Host map[string]any `json:"host"`
		}
		if err := json.Unmarshal(b, &host); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"kernel", "os", "arch", "cores", "memory_bytes", "go_version", "cgroup_mode"} {
			if _, ok := host.Host[k]; !ok {
				t.Errorf("JSON host has no %q key: %s", k, b)
			}
		}
	})
}

func TestWriteTextFixedReport(t *testing.T) {
	r := Report{
		Host:    HostInfo{Kernel: "6.1.0", OS: "Debian", Arch: "amd64", Cores: 2, MemoryBytes: 3 << 30, GoVersion: "go1.26", CgroupMode: "v2"},
		Layers:  layersWith("root", "qemu"),
		Drivers: drivers(layersWith("root", "qemu")),
	}
	var buf bytes.Buffer
	if err := r.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	for _, want := range []string{
		"  machine  amd64, 2 cores, 3.0 GiB memory\n",
		"  cgroups  v2\n",
		"  root      ok       root works\n",
		"  cgroupv1  missing\n            why: cgroupv1 is broken\n            fix: fix cgroupv1\n",
		"  microvm   ok       software emulation (TCG): slow; kvm: kvm is broken; needs qemu\n",
		"  gvisor    missing  needs root, cgroupv1|cgroupv2, runsc\n            why: cgroupv1: cgroupv1 is broken; cgroupv2: cgroupv2 is broken; runsc: runsc is broken\n            fix: fix cgroupv1; fix cgroupv2; fix runsc\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteTextError(t *testing.T) {
	err := Report{}.WriteText(failingWriter{})
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("WriteText to a failing writer = %v, want the write error", err)
	}
}

func TestParseOSRelease(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"debian", "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\n", "Debian GNU/Linux 12 (bookworm)"},
		{"no pretty name", "NAME=Alpine\nVERSION_ID=3.20.0\n", "Alpine 3.20.0"},
		{"single quotes and comments", "# comment\nPRETTY_NAME='Arch Linux'\n", "Arch Linux"},
		{"escaped quote", `PRETTY_NAME="Say \"hi\""`, `Say "hi"`},
		{"garbage", "no equals sign here\n\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseOSRelease(strings.NewReader(tt.in)); got != tt.want {
				t.Errorf("parseOSRelease() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestFormatBytes(t *testing.T) {
	tests := []struct {
		n    uint64
		want string
	}{
		{0, "unknown"},
		{512, "512 B"},
		{1024, "1.0 KiB"},
		{1536, "1.5 KiB"},
		{25276502016, "23.5 GiB"},
		{3 << 40, "3.0 TiB"},
		{5 << 50, "5.0 PiB"},
		{1 << 62, "4096.0 PiB"},
	}
	for _, tt := range tests {
		if got := formatBytes(tt.n); got != tt.want {
			t.Errorf("formatBytes(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}

func TestMarkUnbuilt(t *testing.T) {
	in := []DriverStatus{
		{Name: "native", OK: true, Needs: []string{"root"}},
		{Name: "microvm", OK: true, Needs: []string{"qemu"}},
		{Name: "docker", OK: false, Why: "docker: no engine", Fix: "apt-get install docker.io", Needs: []string{"docker"}},
	}
	out := markUnbuilt(in)
	if !out[0].OK {
		t.Errorf("native, which this airlock has, was marked missing: %+v", out[0])
	}
	if out[1].OK || !strings.Contains(out[1].Why, notBuilt) || out[1].Note != "the host has what it needs" || out[1].Fix != "use --driver native" {
		t.Errorf("microvm, which this airlock lacks, = %+v", out[1])
	}
	if out[2].OK || !strings.HasPrefix(out[2].Why, notBuilt+"; docker: no engine") || out[2].Fix != "apt-get install docker.io" {
		t.Errorf("docker = %+v", out[2])
	}
}
