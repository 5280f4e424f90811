package bench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// sectionTitles head the table's sections.
var sectionTitles = map[string]string{
	"start/binary": "0. start: the airlock program itself, nothing run",
	"start/true":   "1. start: /bin/true, one-shot, fork to exit",
	"start/python": "1. start: python3 -c 'print(1)', one-shot, fork to exit",
	"exec":         "2. exec round trip in a live sandbox",
	"docker":       "2b. docker: the same image and runtime, bare engine and airlock",
	"microvm":      "2c. microvm: start to the first command's exit, exec round trip, idle memory",
	"density":      "3. density: idle sandboxes, memory per sandbox, exec under load",
	"egress":       "4. egress",
	"wasm":         "4b. the wasm driver: an instantiate, python3 print(1)",
	"snapshots":    "4c. snapshots of /workspace (native, the daemon's local store)",
	"throughput":   "5. throughput: runs completed per second",
	"restart":      "6. restart: a daemon that starts again takes up its live sandboxes",
	"e2b":          "7. E2B SDKs: the official JS SDK against the daemon's E2B endpoints (native)",
}

// Column widths of the table.
const (
	numWidth     = 11
	maxStatusLen = 110
)

// WriteTable writes the report as a table for people: a header with the
// machine and the tools' versions, then one line per row with its p50,
// p90 and p99 (or its single value), its baseline and the ratio of the two.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	mode := "full"
	if r.Quick {
		mode = "quick"
	}
	fmt.Fprintf(&b, "airlock bench (%s): %s, %.1f s\n", mode, r.Started.UTC().Format("2006-01-02 15:04:05 UTC"), r.Seconds)
	m := r.Machine
	fmt.Fprintf(&b, "machine   %d cores, %s memory (%s available), kernel %s, cgroups %s, load %s\n",
		m.Cores, gib(m.MemoryBytes), gib(m.AvailableBytes), orUnknown(m.Kernel), orUnknown(m.CgroupMode), orUnknown(m.LoadAvg))
	var tools []string
	for _, t := range m.Tools {
		if t.Version == "" {
			tools = append(tools, fmt.Sprintf("%s missing (%s)", t.Name, t.Missing))
			continue
		}
		tools = append(tools, t.Name+" "+t.Version)
	}
	fmt.Fprintf(&b, "versions  %s\n", strings.Join(tools, ", "))
	s := r.Settings
	fmt.Fprintf(&b, "runs      /bin/true x%d, python3 x%d, density up to %d (steps %s), throughput %s per level\n",
		s.TrueRuns, s.PythonRuns, s.Density, joinInts(s.DensitySteps), time.Duration(s.ThroughputSeconds*float64(time.Second)))
	b.WriteString("ratio     this row's p50 (or value) / the baseline's: below 1 is faster or smaller, except execs/s where above 1 is better\n\n")

	whatW := len("what")
	baseW := len("baseline")
	for _, row := range r.Rows {
		whatW = max(whatW, len(row.What)+2)
		for _, c := range row.Compare {
			baseW = max(baseW, len(baselineCell(c, row.Unit)))
		}
	}
	fmt.Fprintf(&b, "%-*s %*s %*s %*s  %-*s  %s\n", whatW, "what", numWidth, "p50", numWidth, "p90", numWidth, "p99 / value", baseW, "baseline", "ratio")
	section := ""
	for _, row := range r.Rows {
		if row.Section != section {
			section = row.Section
			title := sectionTitles[section]
			if title == "" {
				title = section
			}
			b.WriteString(title + "\n")
		}
		var line string
		what := "  " + row.What
		switch {
		case row.Status != StatusOK:
			line = fmt.Sprintf("%-*s %s", whatW, what, statusText(row))
		case row.Stats != nil:
			line = fmt.Sprintf("%-*s %*s %*s %*s", whatW, what,
				numWidth, num(row.Stats.P50, row.Unit), numWidth, num(row.Stats.P90, row.Unit), numWidth, num(row.Stats.P99, row.Unit))
		case row.Value != nil:
			line = fmt.Sprintf("%-*s %*s %*s %*s", whatW, what, numWidth, "", numWidth, "", numWidth, num(*row.Value, row.Unit))
		default:
			line = fmt.Sprintf("%-*s %*s %*s %*s", whatW, what, numWidth, "", numWidth, "", numWidth, "none")
		}
		if row.Status == StatusOK {
			for i, c := range row.Compare {
				if i > 0 {
					line = strings.Repeat(" ", whatW+3*(numWidth+1))
				}
				line += fmt.Sprintf("  %-*s  %s", baseW, baselineCell(c, row.Unit), ratio(c.Ratio))
				b.WriteString(strings.TrimRight(line, " ") + "\n")
			}
			if len(row.Compare) == 0 {
				b.WriteString(strings.TrimRight(line, " ") + "\n")
			}
			if row.Detail != "" {
				fmt.Fprintf(&b, "%-*s %s\n", whatW, "", clip(row.Detail))
			}
			continue
		}
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\nnote: %s\n", n)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write bench table: %w", err)
	}
	return nil
}

// statusText says why a row has no figure.
func statusText(row Row) string {
	var s string
	switch row.Status {
	case StatusMissing:
		s = "missing (" + row.Detail + ")"
	case StatusNotBuilt:
		s = "not built yet"
		if row.Detail != "" {
			s += " (" + row.Detail + ")"
		}
	default:
		s = string(row.Status)
		if row.Detail != "" {
			s += ": " + row.Detail
		}
	}
	return clip(s)
}

// baselineCell names a baseline and its figure.
func baselineCell(c Comparison, unit string) string {
	if c.Figure == nil {
		return c.Name + " (none)"
	}
	return c.Name + " " + num(*c.Figure, unit)
}

// num formats a figure with its unit, to about three significant digits.
func num(v float64, unit string) string {
	var s string
	switch {
	case unit == UnitSandboxes:
		s = fmt.Sprintf("%.0f", v)
	case v < 10:
		s = fmt.Sprintf("%.2f", v)
	case v < 100:
		s = fmt.Sprintf("%.1f", v)
	default:
		s = fmt.Sprintf("%.0f", v)
	}
	switch unit {
	case UnitMS:
		return s + " ms"
	case UnitMiB:
		return s + " MiB"
	case UnitRate:
		return s + "/s"
	case UnitRequests:
		return s + " req/s"
	case UnitMiBps:
		return s + " MiB/s"
	case UnitTasks:
		return s + " tasks"
	}
	return s
}

// ratio formats a ratio as "5.20x"; "-" when there is none.
func ratio(r *float64) string {
	switch {
	case r == nil:
		return "-"
	case *r < 10:
		return fmt.Sprintf("%.2fx", *r)
	case *r < 100:
		return fmt.Sprintf("%.1fx", *r)
	default:
		return fmt.Sprintf("%.0fx", *r)
	}
}

func clip(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > maxStatusLen {
		return s[:maxStatusLen-3] + "..."
	}
	return s
}

func gib(b uint64) string {
	if b == 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ")
}
