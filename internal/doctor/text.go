package doctor

import (
	"fmt"
	"io"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// WriteText writes the report as an aligned table: the host, then a line
// per layer and per driver saying ok or missing, with, under each missing
// one, why and the fix.
func (r Report) WriteText(w io.Writer) error {
	width := 0
	for _, l := range r.Layers {
		width = max(width, len(l.Name))
	}
	for _, d := range r.Drivers {
		width = max(width, len(d.Name))
	}
	var b strings.Builder
	row := func(name string, ok bool, detail, why, fix string) {
		status := "ok"
		if !ok {
			status = "missing"
		}
		line := fmt.Sprintf("  %-*s  %-7s  %s", width, name, status, detail)
		b.WriteString(strings.TrimRight(line, " ") + "\n")
		indent := strings.Repeat(" ", 2+width+2)
		if !ok && why != "" {
			fmt.Fprintf(&b, "%swhy: %s\n", indent, why)
		}
		if !ok && fix != "" {
			fmt.Fprintf(&b, "%sfix: %s\n", indent, fix)
		}
	}

	h := r.Host
	b.WriteString("host\n")
	fmt.Fprintf(&b, "  kernel   %s\n", orUnknown(h.Kernel))
	fmt.Fprintf(&b, "  os       %s\n", orUnknown(h.OS))
	fmt.Fprintf(&b, "  machine  %s, %d cores, %s memory\n", orUnknown(h.Arch), h.Cores, formatBytes(h.MemoryBytes))
	fmt.Fprintf(&b, "  cgroups  %s\n", orUnknown(h.CgroupMode))
	fmt.Fprintf(&b, "  go       %s\n", orUnknown(h.GoVersion))

	b.WriteString("\nlayers\n")
	for _, l := range r.Layers {
		row(l.Name, l.OK, l.Detail, l.Why, l.Fix)
	}

	b.WriteString("\ndrivers\n")
	for _, d := range r.Drivers {
		var detail []string
		if d.Note != "" {
			detail = append(detail, d.Note)
		}
		if can := capabilityNames(d.Capabilities); len(can) > 0 {
			detail = append(detail, "can: "+strings.Join(can, ", "))
		}
		row(d.Name, d.OK, strings.Join(detail, "; "), d.Why, d.Fix)
	}
	_, err := io.WriteString(w, b.String())
	if err != nil {
		return fmt.Errorf("write doctor report: %w", err)
	}
	return nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// formatBytes renders a memory size for people: "23.5 GiB".
func formatBytes(n uint64) string {
	if n == 0 {
		return "unknown"
	}
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// capabilityNames lists what a driver's sandboxes can do, in words.
func capabilityNames(c sandbox.Capabilities) []string {
	var out []string
	add := func(ok bool, name string) {
		if ok {
			out = append(out, name)
		}
	}
	add(c.Shell, "shell")
	if len(c.Languages) > 0 {
		out = append(out, "code in "+strings.Join(c.Languages, "/"))
	}
	add(c.Files, "files")
	add(c.Background, "background processes")
	add(c.Egress, "egress")
	add(c.HostRoot, "host root")
	add(c.HostMounts, "host mounts")
	add(c.CowMounts, "cow mounts")
	add(c.Images, "images")
	add(c.Modules, "wasm modules")
	add(c.PerExecUsage, "per-exec usage")
	add(c.PTY, "terminals")
	add(c.Snapshots, "snapshots")
	add(c.SurvivesRestart, "survives a restart")
	switch {
	case c.Pause && c.MemoryKeptInHost:
		out = append(out, "pause (a freeze: memory kept in the host)")
	case c.Pause:
		out = append(out, "pause with memory")
	}
	add(c.LiveFork, "live fork")
	return out
}
