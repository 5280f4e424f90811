package sandboxtest

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/cow"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
)

// cowCases check copy-on-write mounts (Mount.Cow): the sandbox writes a
// host directory freely, the host sees nothing of it until an apply, and
// what a hostile sandbox makes is refused.
func cowCases() []testCase {
	needs := []need{needShell, needCowMounts}
	return []testCase{
		{name: "apply", spec: cowMount, needs: needs, run: testCowApply},
		{name: "quota", spec: func(t *testing.T, s *sandbox.Spec) { cowMount(t, s); s.Limits.DiskBytes = 4 << 20 }, needs: needs, run: testCowQuota},
		{name: "hostile", spec: cowMount, needs: needs, run: testCowHostile},
	}
}

// cowMount mounts a host project at /project, copy-on-write. Its files
// are root's and not writable by others: the sandbox writes them as their
// owner would.
func cowMount(t *testing.T, s *sandbox.Spec) {
	dir := filepath.Join(t.TempDir(), "project")
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"main.go": "package main\n", "docs/readme.md": "# readme\n", "old.txt": "old\n", "conf/app.ini": "x=1\n"} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s.Mounts = []sandbox.Mount{{Source: dir, Target: "/project", Cow: true}}
}

// hostTree lists the host directory: path, mode, content.
func hostTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	err = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(p, dir)
		line := rel + " " + fi.Mode().String()
		if fi.Mode().IsRegular() {
			b, _ := root.ReadFile("." + rel)
			line += " " + string(b)
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func cowLayer(t *testing.T, e *env) sandbox.CowLayer {
	t.Helper()
	cm, ok := e.sb.(sandbox.CowMounter)
	if !ok {
		t.Fatalf("the instance (%T) is no sandbox.CowMounter although the driver declares Capabilities.CowMounts", e.sb)
	}
	ls := cm.CowLayers()
	if len(ls) != 1 || ls[0].Target != "/project" || ls[0].Source != e.spec.Mounts[0].Source {
		t.Fatalf("cow layers %+v", ls)
	}
	return ls[0]
}

func pendingKinds(t *testing.T, e *env, dir string) map[string]string {
	t.Helper()
	p, err := cow.Changes(e.ctx, dir, snapshot.DiffLimits{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, c := range p.Changes {
		out[c.Path] = c.Kind
		if c.Refused != "" {
			out[c.Path] += " refused: " + c.Refused
		}
	}
	return out
}

func testCowApply(t *testing.T, e *env) {
	src := e.spec.Mounts[0].Source
	before := hostTree(t, src)
	e.shOK(t, `set -e
cd /project
cat main.go
echo 'func main() {}' >> main.go
mkdir -p pkg && echo 'package pkg' > pkg/pkg.go
rm old.txt
chmod 600 docs/readme.md`)
	if got := hostTree(t, src); !slices.Equal(got, before) {
		t.Fatalf("the host changed before any apply:\n%v\n→\n%v", before, got)
	}
	l := cowLayer(t, e)
	want := map[string]string{"/project/main.go": "modified", "/project/pkg": "added", "/project/pkg/pkg.go": "added", "/project/old.txt": "deleted", "/project/docs/readme.md": "mode"}
	if got := pendingKinds(t, e, l.Dir); !mapsEqual(got, want) {
		t.Fatalf("pending %v, want %v", got, want)
	}
	res, err := cow.Apply(e.ctx, l.Dir, []string{"main.go", "pkg"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Applied) != 3 || len(res.Refused) != 0 {
		t.Errorf("applied %+v, refused %+v", res.Applied, res.Refused)
	}
	if b, _ := os.ReadFile(filepath.Join(src, "main.go")); string(b) != "package main\nfunc main() {}\n" {
		t.Errorf("host main.go %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(src, "old.txt")); string(b) != "old\n" {
		t.Errorf("old.txt was not to be applied: %q", b)
	}
	if _, err := cow.Discard(e.ctx, l.Dir, nil); err != nil {
		t.Fatal(err)
	}
	if got := pendingKinds(t, e, l.Dir); len(got) != 0 {
		t.Errorf("pending after discard: %v", got)
	}
	// The sandbox keeps working on the mount.
	e.shOK(t, "echo again > /project/again.txt && cat /project/main.go >/dev/null")
	if got := pendingKinds(t, e, l.Dir); got["/project/again.txt"] != "added" {
		t.Errorf("pending %v", got)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func testCowQuota(t *testing.T, e *env) {
	src := e.spec.Mounts[0].Source
	before := hostTree(t, src)
	// Files under the file size limit (the disk limit), more than it
	// together.
	o := e.sh(t, "for i in 1 2 3 4; do head -c 2000000 /dev/zero > /project/big$i || exit 1; done")
	if o.res.ExitCode == 0 {
		t.Fatalf("8 MB written into a cow mount of a 4 MiB sandbox: %s", o)
	}
	if !strings.Contains(o.stderr, "No space") {
		t.Errorf("the error is not ENOSPC: %s", o)
	}
	if got := hostTree(t, src); !slices.Equal(got, before) {
		t.Errorf("the host changed")
	}
}

func testCowHostile(t *testing.T, e *env) {
	src := e.spec.Mounts[0].Source
	before := hostTree(t, src)
	e.shOK(t, `set -e
cd /project
rm -rf conf && ln -s /etc conf
ln -s ../../../etc/shadow up
ln main.go hard
printf x > "$(printf 'evil\nname')"
mkfifo fifo`)
	l := cowLayer(t, e)
	got := pendingKinds(t, e, l.Dir)
	for p, want := range map[string]string{
		"/project/conf":         "absolute path",
		"/project/conf/app.ini": "its directory",
		"/project/up":           "leads outside",
		"/project/hard":         "hard link",
		"/project/evil\nname":   "control character",
	} {
		if !strings.Contains(got[p], want) {
			t.Errorf("%q: %q, want it refused saying %q", p, got[p], want)
		}
	}
	// A FIFO is refused; gVisor keeps it in its own kernel, and the layer
	// never holds it.
	if k, ok := got["/project/fifo"]; ok && !strings.Contains(k, "FIFOs") {
		t.Errorf("fifo: %q, want it refused saying FIFOs", k)
	}
	res, err := cow.Apply(e.ctx, l.Dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Applied) != 0 {
		t.Errorf("applied %+v", res.Applied)
	}
	if after := hostTree(t, src); !slices.Equal(after, before) {
		t.Errorf("the host changed:\n%v\n→\n%v", before, after)
	}
	if _, err := cow.Apply(e.ctx, l.Dir, []string{"../etc/passwd"}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("apply ../etc/passwd: %v", err)
	}
}
