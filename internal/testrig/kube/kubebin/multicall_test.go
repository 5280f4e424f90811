package kubebin

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMultiCall builds a multi-call program from two main packages of a
// local module and runs each through a hard link of its name, and through
// the program's own name with the program's as its first argument.
func TestMultiCall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	dir := t.TempDir()
	src, mod, out := filepath.Join(dir, "src"), filepath.Join(dir, "mod"), filepath.Join(dir, "out")
	files := map[string]string{
		"go.mod":             "module example.com/m\n\ngo 1.26\n",
		"cmd/tool-a/main.go": "package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\nfunc main() {\n\tfmt.Println(\"a\", os.Args[1:])\n}\n",
		"cmd/tool-b/main.go": "package main\n\nimport \"fmt\"\n\nvar x = helper()\n\nfunc main() {\n\tfmt.Println(\"b\", x)\n}\n",
		"cmd/tool-b/help.go": "package main\n\nfunc helper() int { return 42 }\n",
		// A test of a main package is left behind.
		"cmd/tool-b/main_test.go": "package main\n\nimport \"testing\"\n\nfunc TestX(t *testing.T) { main() }\n",
		"mod/go.mod":              "module airlock.invalid/build-toy\n\ngo 1.26\n\nrequire example.com/m v0.0.0\n\nreplace example.com/m => ../src\n",
	}
	for name, text := range files {
		path := filepath.Join(dir, "src", name)
		if strings.HasPrefix(name, "mod/") {
			path = filepath.Join(dir, name)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g := group{name: "toy", module: "example.com/m", multiCall: "toy", bins: map[string]string{
		"tool-a": "example.com/m/cmd/tool-a", "tool-b": "example.com/m/cmd/tool-b",
	}}
	if err := g.writeMultiCall(mod, src); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(mod, "tool_b", "main_test.go")); err == nil {
		t.Error("the test of a main package was copied")
	}
	build := exec.Command(goTool(), "build", "-o", filepath.Join(out, "toy"), ".")
	build.Dir = mod
	build.Env = append(os.Environ(), "GOWORK=off", "GOPROXY=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	for _, name := range []string{"tool-a", "tool-b"} {
		if err := os.Link(filepath.Join(out, "toy"), filepath.Join(out, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"tool-a", "x", "y"}, "a [x y]\n"},
		{[]string{"tool-b"}, "b 42\n"},
		{[]string{"toy", "tool-a", "z"}, "a [z]\n"},
	} {
		got, err := exec.Command(filepath.Join(out, tc.argv[0]), tc.argv[1:]...).Output()
		if err != nil || string(got) != tc.want {
			t.Errorf("%v: %q, %v; want %q", tc.argv, got, err, tc.want)
		}
	}
	b, err := exec.Command(filepath.Join(out, "toy")).CombinedOutput()
	if code := exitCode(err); code != 2 || !strings.Contains(string(b), "run as one of tool-a, tool-b") {
		t.Errorf("toy alone: exit %d, %q; want exit 2 naming the programs", code, b)
	}
}

// TestCopyMainWantsOneMain: a main package whose main the rename does not
// find stops the build.
func TestCopyMainWantsOneMain(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main()  {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := copyMain(dir, filepath.Join(t.TempDir(), "x"), "x"); err == nil || !strings.Contains(err.Error(), "0 declarations") {
		t.Errorf("copyMain = %v, want it to say it found no main", err)
	}
}

func exitCode(err error) int {
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestBuildGroups builds groups one after the other while the next one's
// module is prepared, caches them (a second run builds nothing) and, when a
// group fails to compile, says which and leaves no temporary directory.
func TestBuildGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("builds programs")
	}
	t.Setenv("GOPROXY", "off")
	t.Setenv("GOFLAGS", "-mod=mod")
	cache := t.TempDir()
	if err := os.MkdirAll(filepath.Join(cache, "kube"), 0o755); err != nil {
		t.Fatal(err)
	}
	src := func(s string) []byte { return []byte("package main\n\nfunc main() { println(" + s + ") }\n") }
	toy := func(name, s string) group {
		return group{name: name, version: sourceVersion(src(s)), bins: map[string]string{name: "airlock.invalid/" + name}, source: src(s)}
	}
	gs := []group{toy("toy-a", `"a"`), toy("toy-b", `"b"`)}
	var log strings.Builder
	if err := buildGroups(t.Context(), cache, gs, &log); err != nil {
		t.Fatalf("buildGroups: %v\n%s", err, log.String())
	}
	for _, g := range gs {
		if err := g.check(g.dir(cache)); err != nil {
			t.Errorf("%s: %v", g.name, err)
		}
	}
	if got := strings.Count(log.String(), "kubebin: built "); got != 2 {
		t.Errorf("built %d groups, want 2:\n%s", got, log.String())
	}
	log.Reset()
	broken := toy("toy-c", `undefined`)
	err := buildGroups(t.Context(), cache, append(gs, broken, toy("toy-d", `"d"`)), &log)
	if err == nil || !strings.Contains(err.Error(), "build toy-c") {
		t.Errorf("buildGroups with a broken group = %v, want it to name toy-c", err)
	}
	if strings.Contains(log.String(), "built toy-a") {
		t.Errorf("a cached group was built again:\n%s", log.String())
	}
	entries, _ := os.ReadDir(filepath.Join(cache, "kube"))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "tmp-") {
			t.Errorf("%s left behind", e.Name())
		}
	}
}
