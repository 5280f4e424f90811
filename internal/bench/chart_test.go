package bench

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
)

// svgElements parses an SVG document completely and returns its elements
// in order, with their attributes; it fails the test on invalid XML.
func svgElements(t *testing.T, doc []byte) []xml.StartElement {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(doc))
	var els []xml.StartElement
	depth := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("chart is not valid XML: %v\n%s", err, doc)
		}
		switch tk := tok.(type) {
		case xml.StartElement:
			if depth == 0 && (tk.Name.Local != "svg" || tk.Name.Space != "http://www.w3.org/2000/svg") {
				t.Fatalf("root element is %v, want svg in the SVG namespace", tk.Name)
			}
			depth++
			els = append(els, tk.Copy())
		case xml.EndElement:
			depth--
		}
	}
	if depth != 0 {
		t.Fatalf("chart ends with %d elements open", depth)
	}
	return els
}

func attr(el xml.StartElement, name string) string {
	for _, a := range el.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

func TestChartOneBarPerFigure(t *testing.T) {
	r := fakeReport()
	// A label that must be escaped.
	r.Rows[0].What = `fork/exec <the "floor"> & more`
	var b bytes.Buffer
	if err := r.WriteChart(&b); err != nil {
		t.Fatal(err)
	}
	els := svgElements(t, b.Bytes())

	var bars []string // their titles
	var p99s int
	for _, el := range els {
		switch attr(el, "class") {
		case "bar":
			if el.Name.Local != "rect" {
				t.Errorf("a bar is a %s, want rect", el.Name.Local)
			}
			bars = append(bars, "")
		case "p99":
			p99s++
		}
	}
	// Every measured row with a figure has one bar, except the bend (a
	// count of sandboxes); rows without a figure have none.
	var want, wantP99 int
	for _, row := range r.Rows {
		if _, ok := row.Figure(); ok && row.Unit != UnitSandboxes {
			want++
			if row.Stats != nil {
				wantP99++
			}
		}
	}
	if want != 7 {
		t.Fatalf("fake report has %d figures, the test expects 7", want)
	}
	if len(bars) != want {
		t.Errorf("chart has %d bars, want %d (one per figure)", len(bars), want)
	}
	if p99s != wantP99 {
		t.Errorf("chart has %d p99 ticks, want %d", p99s, wantP99)
	}
	s := b.String()
	for _, text := range []string{"fork/exec &lt;the &#34;floor&#34;&gt; &amp; more", "missing (apt-get install runsc)", "not built yet"} {
		if !strings.Contains(s, text) {
			t.Errorf("chart lacks %q", text)
		}
	}
}

func TestChartBarsScale(t *testing.T) {
	rows := []Row{
		{ID: "a", Section: "x", Status: StatusOK, Unit: UnitMiB, Value: ptr(1.0)},
		{ID: "b", Section: "x", Status: StatusOK, Unit: UnitMiB, Value: ptr(4.0)},
	}
	ax := newAxis(rows)
	if ax.log {
		t.Fatal("a span of 4x got a log axis")
	}
	if got := ax.x(4); got != chartBarW {
		t.Errorf("the largest bar is %g long, want the full %d", got, chartBarW)
	}
	if got := ax.x(1); got != chartBarW/4 {
		t.Errorf("a quarter of the largest is %g long, want %d", got, chartBarW/4)
	}

	wide := []Row{
		{ID: "a", Section: "x", Status: StatusOK, Unit: UnitMS, Stats: &Stats{N: 1, P50: 0.5, P99: 0.7}},
		{ID: "b", Section: "x", Status: StatusOK, Unit: UnitMS, Stats: &Stats{N: 1, P50: 150, P99: 300}},
	}
	ax = newAxis(wide)
	if !ax.log || ax.lo != 0.1 || ax.hi != 1000 {
		t.Fatalf("axis for 0.5..300 = %+v, want log from 0.1 to 1000", ax)
	}
	// 1, 10, 100 are at a quarter, half and three quarters of 0.1..1000.
	for v, want := range map[float64]float64{1: chartBarW / 4.0, 10: chartBarW / 2.0, 100: chartBarW * 3 / 4.0} {
		if got := ax.x(v); abs(got-want) > 1e-9 {
			t.Errorf("log x(%g) = %g, want %g", v, got, want)
		}
	}
	if got := ax.x(0.0001); got != 1 {
		t.Errorf("a figure below the axis is %g long, want the 1-unit minimum", got)
	}
}
