package testrig

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
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

// rigMarkers are, per rig scripts/test.sh builds in the background, what a
// package's tests call when they need it (in its own package, the kube
// rig's tests call Shared, Start and Require unqualified).
var rigMarkers = map[string][]*regexp.Regexp{
	"kube-rig": {
		regexp.MustCompile(`\bkube\.(Start|Shared|Require|New)\(`),
		regexp.MustCompile(`\bRequire\([^)]*"kubernetes"`),
	},
	"s3-rig": {
		regexp.MustCompile(`\bStartS3\(`),
		regexp.MustCompile(`\bs3server\.Find\(`),
		regexp.MustCompile(`\bRequire\([^)]*"s3"`),
		regexp.MustCompile(`\bProbe\([^)]*"s3"\)`),
	},
	"root-image": {
		regexp.MustCompile(`\brootimage\.Ensure\(`),
		regexp.MustCompile(`\bdockerd\.TestImage\(`),
	},
}

// kubeOwnMarker is the kube rig's own tests' use of it.
var kubeOwnMarker = regexp.MustCompile(`(^|[^.\w])(Shared|Start|Require)\(t\)`)

// funcStart finds the top-level functions of a Go file, and their names.
var funcStart = regexp.MustCompile(`(?m)^func (\w+)`)

// TestRigList: scripts/test-rigs.txt names, for every package whose tests
// use a rig scripts/test.sh builds in the background, exactly the rigs they
// use, so that no package runs before the rig it needs is built (cold, its
// tests would skip or fail for want of it) and none waits for nothing. A
// RIG:TestName entry says only that test function uses the rig: then every
// use of it in the package is within a test so listed.
func TestRigList(t *testing.T) {
	root := filepath.Join("..", "..")
	listed := map[string]map[string]bool{} // package → rig, or rig:TestName
	b, err := os.ReadFile(filepath.Join(root, "scripts", "test-rigs.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) == 1 {
			t.Errorf("scripts/test-rigs.txt: %s names no rig", f[0])
		}
		if listed[f[0]] != nil {
			t.Errorf("scripts/test-rigs.txt names %s twice", f[0])
		}
		listed[f[0]] = map[string]bool{}
		for _, r := range f[1:] {
			if rigMarkers[strings.Split(r, ":")[0]] == nil {
				t.Errorf("scripts/test-rigs.txt: %s: unknown rig %s", f[0], r)
			}
			listed[f[0]][r] = true
		}
	}
	used := map[string]map[string]string{} // package → rig, or rig:TestName where a test function uses it → the call found
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "testdata", "node_modules", "bin":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		pkg, _ := filepath.Rel(root, filepath.Dir(path))
		pkg = filepath.ToSlash(pkg)
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		code := stripLineComments(string(src))
		// Each use is noted under the rig, and under rig:TestName
		// when it is within the test function TestName.
		starts := funcStart.FindAllStringSubmatchIndex(code, -1)
		note := func(rig string, at int, call string) {
			if used[pkg] == nil {
				used[pkg] = map[string]string{}
			}
			where := filepath.Base(path) + ": " + call
			used[pkg][rig] = where
			fn := ""
			for _, s := range starts {
				if s[0] < at {
					fn = code[s[2]:s[3]]
				}
			}
			if strings.HasPrefix(fn, "Test") {
				used[pkg][rig+":"+fn] = where
			} else {
				used[pkg][rig+":"] = where // outside any test function
			}
		}
		for rig, res := range rigMarkers {
			for _, re := range res {
				for _, m := range re.FindAllStringIndex(code, -1) {
					note(rig, m[0], code[m[0]:m[1]])
				}
			}
		}
		if pkg == "internal/testrig/kube" {
			for _, m := range kubeOwnMarker.FindAllStringIndex(code, -1) {
				note("kube-rig", m[0], strings.TrimSpace(code[m[0]:m[1]]))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for pkg, rigs := range used {
		for rig := range rigs {
			if strings.Contains(rig, ":") || listed[pkg][rig] {
				continue
			}
			// Not listed for the package: each use must be in a test
			// listed as rig:TestName.
			if call, ok := rigs[rig+":"]; ok {
				t.Errorf("%s's tests need %s outside a test function (%s); scripts/test-rigs.txt must list it with %s", pkg, rig, call, rig)
				continue
			}
			for use, call := range rigs {
				if strings.HasPrefix(use, rig+":") && !listed[pkg][use] {
					t.Errorf("%s's %s needs %s (%s); scripts/test-rigs.txt must list it with %s (or %s)", pkg, strings.TrimPrefix(use, rig+":"), rig, call, rig, use)
				}
			}
		}
	}
	for pkg, rigs := range listed {
		if tests, _ := filepath.Glob(filepath.Join(root, pkg, "*_test.go")); len(tests) == 0 {
			t.Errorf("scripts/test-rigs.txt names %s, which has no tests", pkg)
			continue
		}
		for rig := range rigs {
			if used[pkg][rig] == "" {
				t.Errorf("scripts/test-rigs.txt lists %s with %s, but its tests call nothing that needs it", pkg, rig)
			}
		}
	}
}

// stripLineComments drops // comments that take a whole line, so that a
// comment naming a call does not count as the call.
func stripLineComments(src string) string {
	lines := strings.Split(src, "\n")
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "//") {
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}
