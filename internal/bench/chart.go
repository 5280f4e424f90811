package bench

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Chart geometry, in SVG user units.
const (
	chartWidth  = 980
	chartLabelW = 340
	chartBarW   = 420
	chartRowH   = 20
	chartTitleH = 38
	chartGap    = 14
	chartMargin = 16
)

// panel is one group of bars that share a unit.
type panel struct {
	title string
	unit  string
	rows  []Row
}

// panels groups the rows by section and unit, in table order. Rows
// counted in sandboxes (the bend) have no bar.
func panels(rows []Row) []panel {
	var ps []panel
	index := map[string]int{}
	for _, r := range rows {
		if r.Unit == UnitSandboxes || r.Unit == "" {
			continue
		}
		// Totals (a value in ms) get a panel of their own, so that they do
		// not dwarf the latencies beside them.
		total := r.Stats == nil && r.Value != nil && r.Unit == UnitMS
		key := fmt.Sprint(r.Section, "|", r.Unit, "|", total)
		i, ok := index[key]
		if !ok {
			title := sectionTitles[r.Section]
			if title == "" {
				title = r.Section
			}
			what := r.Unit
			if r.Unit == UnitMS && !total {
				what = "p50, ms"
			}
			ps = append(ps, panel{title: title + " (" + what + ")", unit: r.Unit})
			i = len(ps) - 1
			index[key] = i
		}
		ps[i].rows = append(ps[i].rows, r)
	}
	return ps
}

// isAirlock says whether a row measures airlock rather than a baseline.
func isAirlock(r Row) bool {
	switch {
	case strings.Contains(r.ID, "airlock"), r.Section == "exec", r.Section == "microvm":
		return true
	case r.Section == "density":
		return !strings.HasSuffix(r.ID, "-bwrap") && !strings.HasSuffix(r.ID, "-process")
	}
	return false
}

// WriteChart writes the report as an SVG bar chart: a panel per section
// and unit, one bar per measured row (its p50, or its value), with a tick
// at the p99 where there is one. A panel whose figures span more than a
// factor of 20 has a log scale with grid lines at the powers of ten.
// Airlock's bars are blue, the baselines' grey; rows without a figure show
// their status instead of a bar.
func (r *Report) WriteChart(w io.Writer) error {
	ps := panels(r.Rows)
	height := chartMargin * 2
	for _, p := range ps {
		height += chartTitleH + len(p.rows)*chartRowH + chartGap
	}
	height += chartTitleH

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		chartWidth, height, chartWidth, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", chartWidth, height)
	mode := "full"
	if r.Quick {
		mode = "quick"
	}
	y := chartMargin + 14
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="15" font-weight="bold">%s</text>`+"\n", chartMargin, y,
		esc(fmt.Sprintf("airlock bench (%s), %d cores, kernel %s, %s", mode, r.Machine.Cores, r.Machine.Kernel, r.Started.UTC().Format("2006-01-02"))))
	y += chartTitleH - 14
	for _, p := range ps {
		y += chartTitleH
		ax := newAxis(p.rows)
		title := p.title
		if ax.log {
			title += ", log scale"
		}
		// The title, then room for the grid labels.
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", chartMargin, y-20, esc(title))
		if ax.log {
			// Grid lines at the powers of ten, labelled above the bars.
			for v := ax.lo; v <= ax.hi*1.0001; v *= 10 {
				gx := float64(chartMargin+chartLabelW) + ax.x(v)
				fmt.Fprintf(&b, `<line class="grid" x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#dddddd"/>`+"\n",
					gx, y-4, gx, y+len(p.rows)*chartRowH)
				fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="10" fill="#888888" text-anchor="middle">%s</text>`+"\n",
					gx, y-6, esc(strconv.FormatFloat(v, 'g', -1, 64)))
			}
		}
		for _, row := range p.rows {
			ty := y + chartRowH - 6
			fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", chartMargin+8, ty, esc(row.What))
			x0 := chartMargin + chartLabelW
			v, ok := row.Figure()
			if !ok {
				fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#888888">%s</text>`+"\n", x0, ty, esc(clip(statusText(row))))
				y += chartRowH
				continue
			}
			color := "#9aa5b1"
			if isAirlock(row) {
				color = "#2f6fdf"
			}
			bw := ax.x(v)
			fmt.Fprintf(&b, `<rect class="bar" x="%d" y="%d" width="%.1f" height="%d" fill="%s"><title>%s</title></rect>`+"\n",
				x0, y+3, bw, chartRowH-6, color, esc(row.ID+": "+num(v, row.Unit)))
			label := num(v, row.Unit)
			if row.Stats != nil {
				px := float64(x0) + ax.x(row.Stats.P99)
				fmt.Fprintf(&b, `<line class="p99" x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333333"/>`+"\n", px, y+2, px, y+chartRowH-2)
				label += " (p99 " + num(row.Stats.P99, row.Unit) + ")"
			}
			fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", x0+chartBarW+8, ty, esc(label))
			y += chartRowH
		}
		y += chartGap
	}
	b.WriteString("</svg>\n")
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("write bench chart: %w", err)
	}
	return nil
}

// axis maps a panel's figures to bar lengths: linear from zero, or
// logarithmic between powers of ten when the figures span more than a
// factor of 20 (then a linear bar of the smallest would not show).
type axis struct {
	log    bool
	lo, hi float64
}

func newAxis(rows []Row) axis {
	lo, hi := math.Inf(1), 0.0
	for _, r := range rows {
		if v, ok := r.Figure(); ok && v > 0 {
			lo, hi = min(lo, v), max(hi, v)
			if r.Stats != nil {
				hi = max(hi, r.Stats.P99)
			}
		}
	}
	if hi == 0 {
		return axis{lo: 0, hi: 1}
	}
	if hi/lo <= 20 {
		return axis{lo: 0, hi: hi}
	}
	return axis{log: true, lo: math.Pow(10, math.Floor(math.Log10(lo))), hi: math.Pow(10, math.Ceil(math.Log10(hi)))}
}

// x is the length of v's bar; never under a pixel, so a tiny figure shows.
func (a axis) x(v float64) float64 {
	var f float64
	switch {
	case a.log && v > 0:
		f = math.Log10(v/a.lo) / math.Log10(a.hi/a.lo)
	case !a.log && a.hi > 0:
		f = v / a.hi
	}
	return max(1, min(1, f)*chartBarW)
}

// esc escapes s for XML text and attributes.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
