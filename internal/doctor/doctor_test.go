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

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/hostcap"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
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

// probeDriver is a driver whose Probe returns err.
type probeDriver struct {
	fake.Driver
	err  error
	desc string
}

func (d *probeDriver) Probe(context.Context) error { return d.err }
func (d *probeDriver) Describe() string            { return d.desc }

func TestDriverStatus(t *testing.T) {
	tests := []struct {
		name   string
		d      Driver
		wantOK bool
		note   string
		why    string
		fix    string
		canDo  bool
	}{
		{name: "works", d: Driver{Name: "native", Driver: &probeDriver{desc: "namespaces"}}, wantOK: true, note: "namespaces", canDo: true},
		{
			name: "layer missing", d: Driver{Name: "native", Driver: &probeDriver{err: &sandbox.LayerError{Layer: sandbox.LayerLandlock, Why: "no landlock", Fix: "boot with lsm=landlock"}}},
			why: "landlock: no landlock", fix: "boot with lsm=landlock", canDo: true,
		},
		{
			name: "unsupported", d: Driver{Name: "gvisor", Driver: &probeDriver{err: &sandbox.UnsupportedError{What: "gvisor", Why: "no runsc", Fix: "make runsc"}}},
			why: "no runsc", fix: "make runsc", canDo: true,
		},
		{
			name: "plain error", d: Driver{Name: "gvisor", Driver: &probeDriver{err: errors.New("runsc hung")}},
			why: "runsc hung", canDo: true,
		},
		{name: "could not be made", d: Driver{Name: "microvm", Err: errors.New("no agent binary")}, why: "no agent binary"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := status(context.Background(), tt.d)
			if s.Name != tt.d.Name || s.OK != tt.wantOK || s.Note != tt.note || s.Why != tt.why || s.Fix != tt.fix {
				t.Errorf("status = %+v, want ok %v, note %q, why %q, fix %q", s, tt.wantOK, tt.note, tt.why, tt.fix)
			}
			if got := s.Capabilities.Files; got != tt.canDo {
				t.Errorf("capabilities %+v: want the driver's own (files %v)", s.Capabilities, tt.canDo)
			}
			if s.Capabilities.Languages == nil {
				t.Error("capabilities.languages is null in JSON")
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
	r := Run(context.Background(), []Driver{
		{Name: "native", Driver: &probeDriver{}},
		{Name: "gvisor", Driver: &probeDriver{err: &sandbox.UnsupportedError{What: "gvisor", Why: "no runsc", Fix: "make runsc"}}},
	})

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
		if want := []string{"native", "gvisor"}; !slices.Equal(ds, want) {
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
		Host:   HostInfo{Kernel: "6.1.0", OS: "Debian", Arch: "amd64", Cores: 2, MemoryBytes: 3 << 30, GoVersion: "go1.26", CgroupMode: "v2"},
		Layers: layersWith("root", "qemu"),
		Drivers: []DriverStatus{
			status(context.Background(), Driver{Name: "native", Driver: &probeDriver{desc: "namespaces"}}),
			status(context.Background(), Driver{Name: "gvisor", Driver: &probeDriver{err: &sandbox.UnsupportedError{What: "gvisor", Why: "no runsc", Fix: "make runsc"}}}),
		},
	}
	var buf bytes.Buffer
	if err := r.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	// The columns are as wide as the longest name ("cgroupv1").
	for _, want := range []string{
		"  machine  amd64, 2 cores, 3.0 GiB memory\n",
		"  cgroups  v2\n",
		"  root      ok       root works\n",
		"  cgroupv1  missing\n            why: cgroupv1 is broken\n            fix: fix cgroupv1\n",
		"  native    ok       namespaces; can: shell, code in sh/bash/python3, files, background processes, terminals, snapshots\n",
		"  gvisor    missing  can: shell, code in sh/bash/python3, files, background processes, terminals, snapshots\n            why: no runsc\n            fix: make runsc\n",
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

// TestLayersNameNoTestTool: doctor reports the kernel's layers and the
// programs the drivers run, not what only airlock's tests need (those are
// testcap's), and not Docker, whose driver's own Probe speaks for it.
func TestLayersNameNoTestTool(t *testing.T) {
	for _, n := range []string{"chromium", "node", "debroot", "jupyter", "kubernetes", "s3", "wasm", "docker"} {
		if slices.Contains(hostcap.Names, n) {
			t.Errorf("doctor's layers include %q", n)
		}
	}
}
