package snapshot

import (
	"fmt"
	"strings"
)

// maxLCSCells bounds the table of the line diff: past it the differing
// middle of two files is shown as all removed, then all added.
const maxLCSCells = 4 << 20

// context lines around each change in a hunk.
const hunkContext = 3

// Unified returns the unified diff of a and b ("" when equal), with the
// file names from and to on its header lines.
func Unified(from, to, a, b string) string {
	if a == b {
		return ""
	}
	x, y := splitLines(a), splitLines(b)
	ops := lineDiff(x, y)
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", quotePath(from), quotePath(to))
	// Group the script into hunks with hunkContext lines around changes.
	type line struct {
		op   byte // ' ', '-', '+'
		text string
		ai   int // line index in a (before this line)
		bi   int
	}
	var lines []line
	ai, bi := 0, 0
	for _, o := range ops {
		switch o {
		case ' ':
			lines = append(lines, line{' ', x[ai], ai, bi})
			ai++
			bi++
		case '-':
			lines = append(lines, line{'-', x[ai], ai, bi})
			ai++
		case '+':
			lines = append(lines, line{'+', y[bi], ai, bi})
			bi++
		}
	}
	for i := 0; i < len(lines); {
		if lines[i].op == ' ' {
			i++
			continue
		}
		start := max(i-hunkContext, 0)
		end := i
		for end < len(lines) {
			if lines[end].op != ' ' {
				end++
				continue
			}
			// A run of context: longer than twice the context ends the hunk.
			k := end
			for k < len(lines) && lines[k].op == ' ' {
				k++
			}
			if k == len(lines) || k-end > 2*hunkContext {
				end = min(end+hunkContext, len(lines))
				break
			}
			end = k
		}
		var na, nb int
		for _, l := range lines[start:end] {
			if l.op != '+' {
				na++
			}
			if l.op != '-' {
				nb++
			}
		}
		as, bs := lines[start].ai+1, lines[start].bi+1
		if na == 0 {
			as--
		}
		if nb == 0 {
			bs--
		}
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(as, na), hunkRange(bs, nb))
		for _, l := range lines[start:end] {
			out.WriteByte(l.op)
			out.WriteString(l.text)
			if !strings.HasSuffix(l.text, "\n") {
				out.WriteString("\n\\ No newline at end of file\n")
			}
		}
		i = end
	}
	return out.String()
}

func hunkRange(start, n int) string {
	if n == 1 {
		return fmt.Sprint(start)
	}
	return fmt.Sprintf("%d,%d", start, n)
}

// splitLines splits s after each newline; the last line may lack one.
func splitLines(s string) []string {
	var out []string
	for s != "" {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

// lineDiff returns an edit script from x to y: ' ' keeps a line, '-'
// removes one of x, '+' adds one of y. The common head and tail are kept
// as they are; the middle is a longest common subsequence when it is
// small enough, else all of it removed and added.
func lineDiff(x, y []string) []byte {
	pre := 0
	for pre < len(x) && pre < len(y) && x[pre] == y[pre] {
		pre++
	}
	suf := 0
	for suf < len(x)-pre && suf < len(y)-pre && x[len(x)-1-suf] == y[len(y)-1-suf] {
		suf++
	}
	mx, my := x[pre:len(x)-suf], y[pre:len(y)-suf]
	var ops []byte
	for range pre {
		ops = append(ops, ' ')
	}
	if (len(mx)+1)*(len(my)+1) > maxLCSCells {
		for range mx {
			ops = append(ops, '-')
		}
		for range my {
			ops = append(ops, '+')
		}
	} else {
		ops = append(ops, lcs(mx, my)...)
	}
	for range suf {
		ops = append(ops, ' ')
	}
	return ops
}

// lcs returns the edit script of a longest common subsequence of x and y.
func lcs(x, y []string) []byte {
	n, m := len(x), len(y)
	w := m + 1
	t := make([]int32, (n+1)*w)
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if x[i] == y[j] {
				t[i*w+j] = t[(i+1)*w+j+1] + 1
			} else {
				t[i*w+j] = max(t[(i+1)*w+j], t[i*w+j+1])
			}
		}
	}
	var ops []byte
	i, j := 0, 0
	for i < n && j < m {
		switch {
		case x[i] == y[j]:
			ops = append(ops, ' ')
			i++
			j++
		case t[(i+1)*w+j] >= t[i*w+j+1]:
			ops = append(ops, '-')
			i++
		default:
			ops = append(ops, '+')
			j++
		}
	}
	for ; i < n; i++ {
		ops = append(ops, '-')
	}
	for ; j < m; j++ {
		ops = append(ops, '+')
	}
	return ops
}
