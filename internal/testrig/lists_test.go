package testrig

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageLists: every package scripts/test.sh's lists name (the
// timing-sensitive ones it runs one at a time, those make test-quick
// leaves out) exists, so that a moved package cannot slip out of its list
// silently.
func TestPackageLists(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, list := range []string{"scripts/test-serial.txt", "scripts/test-quick-skip.txt"} {
		f, err := os.Open(filepath.Join(root, list))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			pkg, _, _ := strings.Cut(sc.Text(), "#")
			pkg = strings.TrimSpace(pkg)
			if pkg == "" {
				continue
			}
			n++
			tests, _ := filepath.Glob(filepath.Join(root, pkg, "*_test.go"))
			if len(tests) == 0 {
				t.Errorf("%s names %s, which has no tests", list, pkg)
			}
		}
		f.Close()
		if n == 0 {
			t.Errorf("%s names no package", list)
		}
	}
}
