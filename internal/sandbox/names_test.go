package sandbox

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// The hand-written checks accept exactly what the regular expressions they
// replaced accepted.
func TestNamesMatchTheirPatterns(t *testing.T) {
	cases := []struct {
		name  string
		re    *regexp.Regexp
		check func(string) bool
		max   int
	}{
		{"id", regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`), ValidID, 63},
		{"image", regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,511}$`), validImage, 512},
		{"runtime", regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`), validRuntime, 64},
	}
	const alphabet = "aZ09-_.:/@+ \n\x00é"
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range cases {
		fixed := []string{"", "a", "-a", "A", "a" + strings.Repeat("b", c.max-1), "a" + strings.Repeat("b", c.max), "sb-1eb6fdffd895", "docker.io/library/python:3.12@sha256:ab", "runc"}
		for _, s := range fixed {
			if got, want := c.check(s), c.re.MatchString(s); got != want {
				t.Errorf("%s %q: got %v, the pattern says %v", c.name, s, got, want)
			}
		}
		for i := 0; i < 20000; i++ {
			n := r.IntN(8)
			if i%50 == 0 {
				n = c.max - 2 + r.IntN(4)
			}
			var b strings.Builder
			for j := 0; j < n; j++ {
				b.WriteByte(alphabet[r.IntN(len(alphabet))])
			}
			s := b.String()
			if got, want := c.check(s), c.re.MatchString(s); got != want {
				t.Fatalf("%s %q: got %v, the pattern says %v", c.name, s, got, want)
			}
		}
	}
}
