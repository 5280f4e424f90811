package bench

import (
	"bytes"
	"strings"
	"testing"
)

func renderTable(t *testing.T, r *Report) string {
	t.Helper()
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// line returns the table line that starts with "  "+what, and the one after it.
func line(t *testing.T, table, what string) (string, string) {
	t.Helper()
	lines := strings.Split(table, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "  "+what) {
			next := ""
			if i+1 < len(lines) {
				next = lines[i+1]
			}
			return l, next
		}
	}
	t.Fatalf("no line for %q in:\n%s", what, table)
	return "", ""
}

func TestTableHeader(t *testing.T) {
	table := renderTable(t, fakeReport())
	for _, want := range []string{
		"airlock bench (quick): 2026-11-21 06:30:00 UTC, 41.2 s\n",
		"machine   2 cores, 24.0 GiB memory (23.0 GiB available), kernel 6.18.44-test, cgroups hybrid, load 0.28 1.35 1.17\n",
		"versions  airlock (devel), bwrap 0.8.0, qemu missing (apt-get install qemu-system-x86)\n",
		"runs      /bin/true x30, python3 x10, density up to 20 (steps 2, 5, 10, 20), throughput 1s per level\n",
		"1. start: /bin/true, one-shot, fork to exit\n",
		"3. density: idle sandboxes",
		"5. throughput:",
		"\nnote: density: stopped at 5 of 20 sandboxes\n",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

func TestTableRows(t *testing.T) {
	r := fakeReport()
	table := renderTable(t, r)
	tests := []struct {
		what string
		want []string // in this order on the line
		next []string // on the continuation line, if any
	}{
		{what: "fork/exec (the floor)", want: []string{"0.50 ms", "0.62 ms", "0.79 ms"}},
		{what: "bwrap (agent profile)", want: []string{"3.50 ms", "4.16 ms", "5.37 ms", "fork/exec 0.50 ms", "7.00x"}},
		{what: "airlock run, native driver", want: []string{"17.5 ms", "20.0 ms", "31.0 ms", "bwrap 3.50 ms", "5.00x"},
			next: []string{"fork/exec 0.50 ms", "35.0x"}},
		{what: "runsc do", want: []string{"missing (apt-get install runsc)"}},
		{what: "airlock run, gvisor driver", want: []string{"not built yet (no gvisor driver yet)"}},
		{what: "unshare", want: []string{"failed: unshare: exit status 1"}},
		{what: "idle sandbox memory, PSS", want: []string{"2.50 MiB", "bwrap idle 0.50 MiB", "5.00x"},
			next: []string{"runsc idle (none)", "-"}},
		{what: "idle runsc memory, PSS", want: []string{"skipped: stopped at 5 of 20 sandboxes"}},
		{what: "exec p99 bends at", want: []string{"none"}, next: []string{"no bend up to 20 sandboxes"}},
		{what: "airlock exec, 1 client", want: []string{"357/s", "fork/exec 1785/s", "0.20x"}},
	}
	for _, tt := range tests {
		t.Run(tt.what, func(t *testing.T) {
			l, next := line(t, table, tt.what)
			rest := l
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("line lacks %q after the previous cell:\n%s", w, l)
				}
				rest = rest[i+len(w):]
			}
			if len(tt.next) > 0 {
				i := strings.Index(next, tt.next[0])
				if i < 0 || strings.TrimSpace(next[:i]) != "" {
					t.Fatalf("want a continuation line starting with %q, got:\n%s", tt.next[0], next)
				}
				for _, w := range tt.next[1:] {
					if !strings.Contains(next[i:], w) {
						t.Errorf("continuation line lacks %q:\n%s", w, next)
					}
				}
			}
		})
	}
}

// TestTableColumnsAlign checks that the percentiles of measured rows end
// in the same columns, and the ratios start in the same column.
func TestTableColumnsAlign(t *testing.T) {
	table := renderTable(t, fakeReport())
	fe, _ := line(t, table, "fork/exec (the floor)")
	bw, _ := line(t, table, "bwrap (agent profile)")
	al, cont := line(t, table, "airlock run, native driver")
	mem, _ := line(t, table, "idle sandbox memory, PSS")
	end := func(l, cell string) int { return strings.Index(l, cell) + len(cell) }
	if a, b, c := end(fe, "0.79 ms"), end(bw, "5.37 ms"), end(al, "31.0 ms"); a != b || b != c {
		t.Errorf("p99 cells end at %d, %d, %d; want one column:\n%s\n%s\n%s", a, b, c, fe, bw, al)
	}
	if a, b := end(al, "31.0 ms"), end(mem, "2.50 MiB"); a != b {
		t.Errorf("a value ends at %d, a p99 at %d; want the same column:\n%s\n%s", b, a, al, mem)
	}
	if a, b := strings.Index(al, "5.00x"), strings.Index(cont, "35.0x"); a != b {
		t.Errorf("ratios start at %d and %d; want one column:\n%s\n%s", a, b, al, cont)
	}
	if a, b := strings.Index(al, "bwrap 3.50"), strings.Index(cont, "fork/exec 0.50"); a != b {
		t.Errorf("baselines start at %d and %d; want one column:\n%s\n%s", a, b, al, cont)
	}
}

func TestTableHasEveryRow(t *testing.T) {
	r := fakeReport()
	table := renderTable(t, r)
	for _, row := range r.Rows {
		if !strings.Contains(table, "  "+row.What) {
			t.Errorf("table lacks row %s (%q)", row.ID, row.What)
		}
	}
}

func TestNumAndRatio(t *testing.T) {
	tests := []struct {
		v    float64
		unit string
		want string
	}{
		{0.512, UnitMS, "0.51 ms"},
		{12.34, UnitMS, "12.3 ms"},
		{124.4, UnitMS, "124 ms"},
		{1785.4, UnitRate, "1785/s"},
		{0.77, UnitMiB, "0.77 MiB"},
		{100, UnitSandboxes, "100"},
		{3, UnitRequests, "3.00 req/s"},
	}
	for _, tt := range tests {
		if got := num(tt.v, tt.unit); got != tt.want {
			t.Errorf("num(%g, %q) = %q, want %q", tt.v, tt.unit, got, tt.want)
		}
	}
	for v, want := range map[float64]string{0.284: "0.28x", 6.86: "6.86x", 24.33: "24.3x", 166.2: "166x"} {
		if got := ratio(&v); got != want {
			t.Errorf("ratio(%g) = %q, want %q", v, got, want)
		}
	}
	if got := ratio(nil); got != "-" {
		t.Errorf("ratio(nil) = %q, want -", got)
	}
}
