package bench

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/hostcap"
)

// toolVersion is what `TOOL --version` said, or how to install TOOL.
type toolVersion struct {
	name    string
	version string // empty when missing
	fix     string
}

// versionOf runs argv (a --version call) and returns its first line with
// prefix cut off; "" when the program is missing or fails.
func versionOf(ctx context.Context, prefix string, argv ...string) string {
	p, err := exec.LookPath(argv[0])
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, p, argv[1:]...)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), prefix))
}

// qemuTool names the system emulator of this architecture.
func qemuTool() (bin, fix string) {
	if runtime.GOARCH == "arm64" {
		return "qemu-system-aarch64", "apt-get install qemu-system-arm"
	}
	return "qemu-system-x86_64", "apt-get install qemu-system-x86"
}

// tools finds the versions of every program the bench runs.
func tools(ctx context.Context) []toolVersion {
	qbin, qfix := qemuTool()
	ts := []toolVersion{
		{name: "bwrap", version: versionOf(ctx, "bubblewrap ", "bwrap", "--version"), fix: fixBwrap},
		{name: "runsc", version: runscVersion(ctx), fix: fixRunsc},
		{name: "unshare", version: versionOf(ctx, "unshare from ", "unshare", "--version"), fix: fixUnshare},
		{name: "python3", version: versionOf(ctx, "Python ", pythonArgv[0], "--version"), fix: fixPython},
		{name: "qemu", version: versionOf(ctx, "QEMU emulator version ", qbin, "--version"), fix: qfix},
	}
	for i := range ts {
		if ts[i].name == "qemu" && ts[i].version != "" {
			ts[i].version = qbin + " " + ts[i].version
		}
	}
	return ts
}

// airlockVersion is the version of this binary from its build info.
func airlockVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		v += " " + rev + dirty
	}
	return strings.TrimSpace(v)
}

// machine describes this host.
func machine(tv []toolVersion) Machine {
	m := Machine{Cores: runtime.NumCPU(), CgroupMode: hostcap.CgroupMode()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if mi, err := readMemInfo(); err == nil {
		m.MemoryBytes, m.AvailableBytes = mi.Total, mi.Available
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	m.Tools = []Tool{
		{Name: "airlock", Version: airlockVersion()},
		{Name: "go", Version: runtime.Version()},
	}
	for _, t := range tv {
		tool := Tool{Name: t.name, Version: t.version}
		if t.version == "" {
			tool.Missing = t.fix
		}
		m.Tools = append(m.Tools, tool)
	}
	return m
}
