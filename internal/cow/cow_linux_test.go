package cow

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/procid"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// fixture is a host directory, its cow layer, and the overlay attached at
// merged: what the sandbox sees and writes (the tests write it as root).
type fixture struct {
	host, dir, merged string
}

func newFixture(t *testing.T, size int64, files map[string]string) fixture {
	t.Helper()
	return newFixtureWith(t, size, files, nil)
}

// newFixtureWith is newFixture with setup run on the host directory
// before the layer is made.
func newFixtureWith(t *testing.T, size int64, files map[string]string, setup func(host string)) fixture {
	t.Helper()
	testcap.Require(t, "root", "overlay")
	base := t.TempDir()
	host := filepath.Join(base, "project")
	must(t, os.Mkdir(host, 0o755))
	for name, content := range files {
		p := filepath.Join(host, name)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(content), 0o644))
	}
	must(t, filepath.Walk(host, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, 4321, 4321)
	}))
	if setup != nil {
		setup(host)
	}
	dir := LayerDir(filepath.Join(base, "state"), "sb1", 0)
	l, mnt, err := Make(context.Background(), dir, "sb1", sandbox.Mount{Source: host, Target: "/w", Cow: true}, size, IDMap{})
	if err != nil {
		t.Fatal(err)
	}
	merged, err := Attach(l.Dir, mnt)
	mnt.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := Remove(dir); err != nil {
			t.Errorf("remove the layer: %v", err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the layer's directory is left: %v", err)
		}
	})
	return fixture{host: host, dir: dir, merged: merged}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (f fixture) sandboxWrite(t *testing.T, name, content string) {
	t.Helper()
	p := filepath.Join(f.merged, name)
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(t, os.WriteFile(p, []byte(content), 0o644))
}

func (f fixture) hostRead(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.host, name))
	if err != nil {
		t.Fatalf("host %s: %v", name, err)
	}
	return string(b)
}

func (f fixture) changes(t *testing.T) map[string]Change {
	t.Helper()
	p, err := Changes(context.Background(), f.dir, snapshot.DiffLimits{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Change{}
	for _, c := range p.Changes {
		out[strings.TrimPrefix(c.Path, "/w/")] = c
	}
	return out
}

// snapshotHost records every entry of the host directory with its content,
// mode and owner.
func snapshotHost(t *testing.T, host string) map[string]string {
	t.Helper()
	out := map[string]string{}
	must(t, filepath.Walk(host, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		v := fi.Mode().String() + " " + strings.Repeat("", 0)
		v += " " + string(rune('0'+st.Uid%10))
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			v += " " + string(b)
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			tg, _ := os.Readlink(p)
			v += " -> " + tg
		}
		out[strings.TrimPrefix(p, host)] = v
		return nil
	}))
	return out
}

func TestChangesAndApply(t *testing.T) {
	f := newFixture(t, 16<<20, map[string]string{"a.txt": "one\ntwo\n", "sub/b.txt": "b\n", "del.txt": "bye\n"})
	f.sandboxWrite(t, "a.txt", "one\nTWO\n")
	f.sandboxWrite(t, "new/c.txt", "c\n")
	must(t, os.Remove(filepath.Join(f.merged, "del.txt")))
	must(t, os.Chmod(filepath.Join(f.merged, "sub/b.txt"), 0o600))
	must(t, os.Symlink("../a.txt", filepath.Join(f.merged, "sub/link")))

	ch := f.changes(t)
	want := map[string]string{"a.txt": "modified", "new": "added", "new/c.txt": "added", "del.txt": "deleted", "sub/b.txt": "mode", "sub/link": "added"}
	for p, k := range want {
		if ch[p].Kind != k {
			t.Errorf("%s: kind %q, want %q (%+v)", p, ch[p].Kind, k, ch[p])
		}
		if ch[p].Refused != "" || ch[p].Conflict != "" {
			t.Errorf("%s: refused %q, conflict %q", p, ch[p].Refused, ch[p].Conflict)
		}
	}
	if len(ch) != len(want) {
		t.Errorf("changes %v, want %v", keys(ch), want)
	}
	if !strings.Contains(ch["a.txt"].Unified, "-two\n+TWO\n") {
		t.Errorf("a.txt's diff: %q", ch["a.txt"].Unified)
	}

	// A subset first: only a.txt reaches the host.
	res, err := Apply(context.Background(), f.dir, []string{"a.txt"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Applied) != 1 || res.Applied[0].Path != "/w/a.txt" || !sandbox.ValidDigest(res.Applied[0].Digest) {
		t.Errorf("applied %+v", res.Applied)
	}
	if got := f.hostRead(t, "a.txt"); got != "one\nTWO\n" {
		t.Errorf("host a.txt = %q", got)
	}
	if _, err := os.Stat(filepath.Join(f.host, "new")); err == nil {
		t.Error("new/ reached the host with a.txt alone applied")
	}
	if f.hostRead(t, "del.txt") != "bye\n" {
		t.Error("del.txt changed")
	}
	if _, ok := f.changes(t)["a.txt"]; ok {
		t.Error("a.txt is still pending after its apply")
	}
	// A file below a new directory brings the directory.
	if _, err := Apply(context.Background(), f.dir, []string{"/w/new/c.txt"}); err != nil {
		t.Fatal(err)
	}
	if f.hostRead(t, "new/c.txt") != "c\n" {
		t.Error("new/c.txt not applied")
	}
	// Then the rest.
	res, err = Apply(context.Background(), f.dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Refused) != 0 {
		t.Errorf("refused %+v", res.Refused)
	}
	if _, err := os.Stat(filepath.Join(f.host, "del.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("del.txt still on the host: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(f.host, "sub/b.txt")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("sub/b.txt mode: %v %v", fi, err)
	}
	if tg, err := os.Readlink(filepath.Join(f.host, "sub/link")); err != nil || tg != "../a.txt" {
		t.Errorf("sub/link: %q %v", tg, err)
	}
	// New files belong to the host directory's owner.
	for _, p := range []string{"new", "new/c.txt", "sub/link", "a.txt"} {
		var st unix.Stat_t
		must(t, unix.Lstat(filepath.Join(f.host, p), &st))
		if st.Uid != 4321 || st.Gid != 4321 {
			t.Errorf("%s owned by %d:%d, want 4321:4321", p, st.Uid, st.Gid)
		}
	}
	if ch := f.changes(t); len(ch) != 0 {
		t.Errorf("pending after apply all: %v", keys(ch))
	}
	leftovers, _ := filepath.Glob(filepath.Join(f.host, "*", tempPrefix+"*"))
	if len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

func keys(m map[string]Change) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestConflict: the host changed a file since the sandbox started; an
// apply naming it applies nothing.
func TestConflict(t *testing.T) {
	f := newFixture(t, 16<<20, map[string]string{"a.txt": "a\n", "b.txt": "b\n"})
	f.sandboxWrite(t, "a.txt", "sandbox\n")
	f.sandboxWrite(t, "c.txt", "new\n")
	// The host edits a.txt afterwards (the same size and time would not
	// matter: digests are compared).
	must(t, os.WriteFile(filepath.Join(f.host, "a.txt"), []byte("host!\n"), 0o644))
	if c := f.changes(t)["a.txt"]; c.Conflict == "" {
		t.Errorf("a.txt shows no conflict: %+v", c)
	}
	before := snapshotHost(t, f.host)
	_, err := Apply(context.Background(), f.dir, nil)
	var ce *ConflictError
	if !errors.As(err, &ce) || len(ce.Conflicts) != 1 || ce.Conflicts[0].Path != "/w/a.txt" {
		t.Fatalf("apply: %v", err)
	}
	if !strings.Contains(err.Error(), "nothing was applied") {
		t.Errorf("message: %v", err)
	}
	if after := snapshotHost(t, f.host); !mapsEqual(before, after) {
		t.Errorf("the host changed: %v → %v", before, after)
	}
	// The others still apply when named.
	if _, err := Apply(context.Background(), f.dir, []string{"c.txt"}); err != nil {
		t.Fatal(err)
	}
	if f.hostRead(t, "c.txt") != "new\n" || f.hostRead(t, "a.txt") != "host!\n" {
		t.Error("c.txt alone was to be applied")
	}
	// A file the host made where the sandbox made one too.
	f.sandboxWrite(t, "d.txt", "sandbox\n")
	must(t, os.WriteFile(filepath.Join(f.host, "d.txt"), []byte("host\n"), 0o644))
	if _, err := Apply(context.Background(), f.dir, []string{"d.txt"}); !errors.As(err, &ce) {
		t.Errorf("apply over a file the host made: %v", err)
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

// TestHostile: what a hostile sandbox makes is refused, each with its
// reason, and the host holds nothing of it.
func TestHostile(t *testing.T) {
	f := newFixture(t, 16<<20, map[string]string{"conf/app.ini": "x=1\n", "secret.txt": "s\n", "ok.txt": "ok\n"})
	// A directory replaced with a symlink to /etc, one to ../../etc.
	must(t, os.RemoveAll(filepath.Join(f.merged, "conf")))
	must(t, os.Symlink("/etc", filepath.Join(f.merged, "conf")))
	must(t, os.Symlink("../../etc/passwd", filepath.Join(f.merged, "up")))
	// A hard link to a host file.
	must(t, os.Link(filepath.Join(f.merged, "secret.txt"), filepath.Join(f.merged, "hard")))
	// A name with control characters.
	f.sandboxWrite(t, "evil\nname", "x\n")
	f.sandboxWrite(t, "dir\x1b[31m/inner.txt", "x\n")
	// A FIFO and a setuid file.
	must(t, unix.Mkfifo(filepath.Join(f.merged, "fifo"), 0o644))
	f.sandboxWrite(t, "suid", "#!/bin/sh\n")
	must(t, os.Chmod(filepath.Join(f.merged, "suid"), 0o4755|os.ModeSetuid))
	must(t, unix.Chmod(filepath.Join(f.merged, "suid"), 0o4755))
	f.sandboxWrite(t, "ok.txt", "fine\n")

	ch := f.changes(t)
	for p, want := range map[string]string{
		"conf":                  "absolute path",
		"conf/app.ini":          "its directory",
		"up":                    "leads outside",
		"hard":                  "hard link",
		"evil\nname":            "control character",
		"dir\x1b[31m":           "control character",
		"dir\x1b[31m/inner.txt": "control character",
		"fifo":                  "never makes device files, FIFOs",
	} {
		if !strings.Contains(ch[p].Refused, want) {
			t.Errorf("%q: refused %q, want it to say %q", p, ch[p].Refused, want)
		}
	}
	before := snapshotHost(t, f.host)
	res, err := Apply(context.Background(), f.dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	var applied []string
	for _, a := range res.Applied {
		applied = append(applied, strings.TrimPrefix(a.Path, "/w/"))
		if a.Path == "/w/suid" && !strings.Contains(a.Note, "setuid") {
			t.Errorf("suid applied without a note: %+v", a)
		}
	}
	slices.Sort(applied)
	if !slices.Equal(applied, []string{"ok.txt", "suid"}) {
		t.Errorf("applied %v, want ok.txt and suid; refused %+v", applied, res.Refused)
	}
	after := snapshotHost(t, f.host)
	for k, v := range before {
		if k != "/ok.txt" && after[k] != v {
			t.Errorf("host %s changed: %q → %q", k, v, after[k])
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok && k != "/suid" {
			t.Errorf("host gained %q", k)
		}
	}
	if fi, err := os.Stat(filepath.Join(f.host, "suid")); err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("suid on the host: %v %v", fi.Mode(), err)
	}
	if fi, err := os.Lstat(filepath.Join(f.host, "conf")); err != nil || !fi.IsDir() {
		t.Errorf("host conf is no longer a directory: %v", err)
	}
	// Paths with ".." are refused before anything is read.
	for _, p := range []string{"../x", "/etc/passwd", "a/../../b"} {
		if _, err := Apply(context.Background(), f.dir, []string{p}); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("apply %q: %v", p, err)
		}
	}
	for _, n := range []string{"a/../b", "..", "./a", "a\tb", "/abs"} {
		if CheckName(n) == "" {
			t.Errorf("CheckName(%q) accepts it", n)
		}
	}
}

// TestSymlinkOnHost: the host replaced a directory with a symlink out of
// the directory since the sandbox started: apply never writes through it.
func TestSymlinkOnHost(t *testing.T) {
	f := newFixture(t, 16<<20, map[string]string{"d/a.txt": "a\n"})
	f.sandboxWrite(t, "d/b.txt", "b\n")
	outside := t.TempDir()
	must(t, os.RemoveAll(filepath.Join(f.host, "d")))
	must(t, os.Symlink(outside, filepath.Join(f.host, "d")))
	_, err := Apply(context.Background(), f.dir, nil)
	var ce *ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("apply through a host symlink: %v", err)
	}
	if names, _ := os.ReadDir(outside); len(names) != 0 {
		t.Errorf("apply wrote outside the directory: %v", names)
	}
}

// TestQuota: the upper layer is bounded; the sandbox gets ENOSPC, the host
// nothing.
func TestQuota(t *testing.T) {
	f := newFixture(t, 1<<20, map[string]string{"a.txt": "a\n"})
	before := snapshotHost(t, f.host)
	big := make([]byte, 2<<20)
	err := os.WriteFile(filepath.Join(f.merged, "big"), big, 0o644)
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("writing 2 MiB into a 1 MiB layer: %v", err)
	}
	if after := snapshotHost(t, f.host); !mapsEqual(before, after) {
		t.Error("the host changed")
	}
	if c := f.changes(t)["big"]; c.Kind != "added" || c.After.Size >= int64(len(big)) {
		t.Errorf("big: %+v", c)
	}
}

func TestDiscard(t *testing.T) {
	f := newFixture(t, 16<<20, map[string]string{"a.txt": "a\n", "d/x": "x\n"})
	f.sandboxWrite(t, "a.txt", "changed\n")
	f.sandboxWrite(t, "n/new.txt", "new\n")
	must(t, os.RemoveAll(filepath.Join(f.merged, "d")))
	res, err := Discard(context.Background(), f.dir, []string{"n", "d"})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(res.Discarded)
	if !slices.Equal(res.Discarded, []string{"/w/d", "/w/d/x", "/w/n", "/w/n/new.txt"}) || len(res.Refused) != 0 {
		t.Errorf("discarded %v, refused %v", res.Discarded, res.Refused)
	}
	ch := f.changes(t)
	if len(ch) != 1 || ch["a.txt"].Kind != "modified" {
		t.Errorf("pending %v", keys(ch))
	}
	if _, err := Discard(context.Background(), f.dir, nil); err != nil {
		t.Fatal(err)
	}
	if ch := f.changes(t); len(ch) != 0 {
		t.Errorf("pending after discarding all: %v", keys(ch))
	}
	if f.hostRead(t, "a.txt") != "a\n" {
		t.Error("discard touched the host")
	}
}

// TestCrashDuringApply kills (SIGKILL) a process in the middle of an
// apply: each host file is then old or new, never torn, and Recover says
// which were applied.
func TestCrashDuringApply(t *testing.T) {
	if dir := os.Getenv("AIRLOCK_COW_CRASH_DIR"); dir != "" {
		_, err := Apply(context.Background(), dir, nil)
		if err != nil {
			os.Exit(2)
		}
		os.Exit(0)
	}
	const n = 120
	files := map[string]string{}
	for i := range n {
		files[name(i)] = strings.Repeat("old ", 64<<10)
	}
	f := newFixture(t, 256<<20, files)
	for i := range n {
		f.sandboxWrite(t, name(i), strings.Repeat("new ", 64<<10))
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashDuringApply$")
	cmd.Env = append(os.Environ(), "AIRLOCK_COW_CRASH_DIR="+f.dir)
	must(t, cmd.Start())
	// Kill it once it has begun writing the host.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(journalPath(f.dir)); err == nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(30 * time.Millisecond)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()

	r, err := Recover(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	if r == nil {
		t.Skip("the apply finished before it was killed (a fast disk): nothing to recover")
	}
	newCount := 0
	for i := range n {
		got := f.hostRead(t, name(i))
		switch got {
		case strings.Repeat("new ", 64<<10):
			newCount++
			if !slices.Contains(r.Applied, "/w/"+name(i)) {
				t.Errorf("%s is new but not reported applied", name(i))
			}
		case strings.Repeat("old ", 64<<10):
			if !slices.Contains(r.NotApplied, "/w/"+name(i)) {
				t.Errorf("%s is old but not reported as not applied", name(i))
			}
		default:
			t.Fatalf("%s is torn (%d bytes)", name(i), len(got))
		}
	}
	t.Logf("killed after %d of %d files", newCount, n)
	if leftovers, _ := filepath.Glob(filepath.Join(f.host, tempPrefix+"*")); len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
	// The applied ones are no longer pending; the rest are, and apply.
	if ch := f.changes(t); len(ch) != n-newCount {
		t.Errorf("%d pending after recovery, want %d", len(ch), n-newCount)
	}
	if _, err := Apply(context.Background(), f.dir, nil); err != nil {
		t.Fatal(err)
	}
	if ch := f.changes(t); len(ch) != 0 {
		t.Errorf("pending after the second apply: %v", keys(ch))
	}
}

func name(i int) string { return "f" + string(rune('a'+i/26)) + string(rune('a'+i%26)) }

// TestApplyReviewed: an apply of what a reviewer saw refuses changes the
// sandbox made after the review, and applies the reviewed ones.
func TestApplyReviewed(t *testing.T) {
	f := newFixture(t, 16<<20, map[string]string{"a.txt": "a\n", "b.txt": "b\n"})
	f.sandboxWrite(t, "a.txt", "reviewed\n")
	f.sandboxWrite(t, "b.txt", "reviewed\n")
	shown := f.changes(t)
	// The sandbox rewrites a.txt after the review.
	f.sandboxWrite(t, "a.txt", "sneaky\n")
	expect := map[string]string{"a.txt": shown["a.txt"].Entry, "/w/b.txt": shown["b.txt"].Entry}
	_, err := ApplyReviewed(context.Background(), f.dir, []string{"a.txt", "b.txt"}, expect)
	var ce *ConflictError
	if !errors.As(err, &ce) || len(ce.Conflicts) != 1 || ce.Conflicts[0].Path != "/w/a.txt" || !strings.Contains(ce.Conflicts[0].Reason, "after it was shown") {
		t.Fatalf("apply after a rewrite: %v", err)
	}
	if f.hostRead(t, "a.txt") != "a\n" || f.hostRead(t, "b.txt") != "b\n" {
		t.Fatal("the host changed")
	}
	res, err := ApplyReviewed(context.Background(), f.dir, []string{"b.txt"}, map[string]string{"b.txt": shown["b.txt"].Entry})
	if err != nil || len(res.Applied) != 1 || res.Applied[0].Digest != shown["b.txt"].After.Digest {
		t.Fatalf("the reviewed b.txt: %+v %v", res, err)
	}
	// A path that is no longer pending, and a malformed digest.
	if _, err := ApplyReviewed(context.Background(), f.dir, []string{"b.txt"}, map[string]string{"b.txt": shown["b.txt"].Entry}); err == nil {
		t.Error("apply of a change already applied")
	}
	// A malformed entry, and a content digest (which does not cover the
	// mode or a symlink's target).
	for _, d := range []string{"md5:x", shown["a.txt"].After.Digest, "entry:sha256:XYZ"} {
		if _, err := ApplyReviewed(context.Background(), f.dir, nil, map[string]string{"a.txt": d}); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("expect %q: %v", d, err)
		}
	}
}

// TestDigestCache: a file rewritten with the same size and modification
// time is hashed again (its ctime moved), so a listing never shows a stale
// digest.
func TestDigestCache(t *testing.T) {
	f := newFixture(t, 16<<20, map[string]string{"a.txt": "aaaa"})
	f.sandboxWrite(t, "a.txt", "bbbb")
	p := filepath.Join(f.merged, "a.txt")
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	first := f.changes(t)["a.txt"].After.Digest
	if again := f.changes(t)["a.txt"].After.Digest; again != first {
		t.Fatalf("two listings differ: %s %s", first, again)
	}
	time.Sleep(10 * time.Millisecond)
	must(t, os.WriteFile(p, []byte("cccc"), 0o644))
	must(t, os.Chtimes(p, fi.ModTime(), fi.ModTime()))
	if got := f.changes(t)["a.txt"].After.Digest; got == first {
		t.Errorf("a same-size rewrite with the old mtime shows the old digest %s", got)
	}
}

// TestTooManyToList: a layer past the entry limit cannot be listed or
// applied (a clear error), and discarding everything still works.
func TestTooManyToList(t *testing.T) {
	// 256 MiB: the tmpfs has an inode per KiB.
	f := newFixture(t, 256<<20, map[string]string{"a.txt": "a\n"})
	for i := range MaxEntries/1000 + 1 {
		d := filepath.Join(f.merged, fmt.Sprintf("d%03d", i))
		must(t, os.Mkdir(d, 0o755))
		for j := range 1000 {
			must(t, os.WriteFile(filepath.Join(d, fmt.Sprint(j)), nil, 0o644))
		}
	}
	if _, err := Changes(context.Background(), f.dir, snapshot.DiffLimits{}); !errors.Is(err, sandbox.ErrLimit) || !strings.Contains(err.Error(), "discard changes") {
		t.Fatalf("listing past the limit: %v", err)
	}
	if _, err := Apply(context.Background(), f.dir, nil); !errors.Is(err, sandbox.ErrLimit) {
		t.Fatalf("apply past the limit: %v", err)
	}
	res, err := Discard(context.Background(), f.dir, nil)
	if err != nil || len(res.Discarded) != MaxEntries/1000+1 {
		t.Fatalf("discard all: %v, %d discarded", err, len(res.Discarded))
	}
	if ch := f.changes(t); len(ch) != 0 {
		t.Errorf("pending after discarding all: %d", len(ch))
	}
	if names, _ := os.ReadDir(f.host); len(names) != 1 {
		t.Errorf("the host changed: %v", names)
	}
}

// TestConflictInRemovedDir: the sandbox removed a directory in which the
// host has made a file since: a conflict, nothing applied.
func TestConflictInRemovedDir(t *testing.T) {
	f := newFixture(t, 16<<20, map[string]string{"d/a": "a\n", "b": "b\n"})
	must(t, os.RemoveAll(filepath.Join(f.merged, "d")))
	f.sandboxWrite(t, "b", "sandbox\n")
	must(t, os.WriteFile(filepath.Join(f.host, "d", "new"), []byte("host\n"), 0o644))
	_, err := Apply(context.Background(), f.dir, nil)
	var ce *ConflictError
	if !errors.As(err, &ce) || len(ce.Conflicts) != 1 || ce.Conflicts[0].Path != "/w/d" || !strings.Contains(ce.Conflicts[0].Reason, "d/new") {
		t.Fatalf("apply: %v", err)
	}
	if f.hostRead(t, "d/a") != "a\n" || f.hostRead(t, "b") != "b\n" {
		t.Error("the host changed")
	}
}

// TestRecoverLeavesLiveApply: a journal whose applying process lives (an
// apply in progress, perhaps of another airlock sharing the state
// directory) is not taken for an interrupted one.
func TestRecoverLeavesLiveApply(t *testing.T) {
	f := newFixture(t, 16<<20, map[string]string{"a": "a\n"})
	st, err := procid.StartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	must(t, writeAtomic(journalPath(f.dir), journal{Sandbox: "sb1", Source: f.host, Target: "/w", Pid: os.Getpid(), PidStart: st}))
	if r, err := Recover(f.dir); r != nil || err != nil {
		t.Fatalf("Recover of a live apply: %+v %v", r, err)
	}
	if _, err := os.Stat(journalPath(f.dir)); err != nil {
		t.Fatalf("the live apply's journal is gone: %v", err)
	}
	// Once its process is gone (another start time), it is recovered.
	must(t, writeAtomic(journalPath(f.dir), journal{Sandbox: "sb1", Source: f.host, Target: "/w", Pid: os.Getpid(), PidStart: st + 1}))
	if r, err := Recover(f.dir); r == nil || err != nil {
		t.Fatalf("Recover of a dead apply: %+v %v", r, err)
	}
}

// TestSymlinkChain is N1 of the second security review: y -> . and
// shadow -> y/y/…/../../etc/shadow each read as if they stay inside the
// mount, and together lead to /etc/shadow; apply made both on the host.
func TestSymlinkChain(t *testing.T) {
	f := newFixture(t, 16<<20, map[string]string{"f.txt": "f\n", "d/g.txt": "g\n"})
	must(t, os.Symlink(".", filepath.Join(f.merged, "y")))
	must(t, os.Symlink(strings.Repeat("y/", 10)+strings.Repeat("../", 10)+"etc/shadow", filepath.Join(f.merged, "shadow")))
	must(t, os.Symlink("y/y/../../"+filepath.Base(f.host)+"-sibling", filepath.Join(f.merged, "esc")))
	must(t, os.Symlink("y/y/d/../f.txt", filepath.Join(f.merged, "fine")))
	ch := f.changes(t)
	for p, want := range map[string]string{"shadow": "leads outside", "esc": "leads outside", "y": "", "fine": ""} {
		if got := ch[p].Refused; (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("%s: refused %q, want %q", p, got, want)
		}
	}
	res, err := Apply(context.Background(), f.dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	var applied []string
	for _, a := range res.Applied {
		applied = append(applied, strings.TrimPrefix(a.Path, "/w/"))
	}
	slices.Sort(applied)
	if !slices.Equal(applied, []string{"fine", "y"}) {
		t.Errorf("applied %v; refused %+v", applied, res.Refused)
	}
	for _, n := range []string{"shadow", "esc"} {
		if _, err := os.Lstat(filepath.Join(f.host, n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("host %s: %v", n, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(f.host, "fine")); err != nil || string(b) != "f\n" {
		t.Errorf("host fine: %q %v", b, err)
	}
}

// TestSymlinkChainHost: what is on the host counts too. A link the sandbox
// makes may not turn a host link that stays inside into one that leaves,
// and a link checked in the sandbox's tree is checked again in the tree an
// apply of some of the changes makes.
func TestSymlinkChainHost(t *testing.T) {
	f := newFixtureWith(t, 16<<20, map[string]string{"f.txt": "f\n", "y/keep": "k\n"}, func(host string) {
		must(t, os.Symlink("y/../f.txt", filepath.Join(host, "x")))
		must(t, os.Symlink(".", filepath.Join(host, "up")))
	})
	// y becomes y -> .: the host's x -> y/../f.txt would lead to ../f.txt.
	must(t, os.RemoveAll(filepath.Join(f.merged, "y")))
	must(t, os.Symlink(".", filepath.Join(f.merged, "y")))
	// up -> . becomes a directory, and w -> up/../f.txt stays inside
	// only if up is applied too.
	must(t, os.Remove(filepath.Join(f.merged, "up")))
	must(t, os.Mkdir(filepath.Join(f.merged, "up"), 0o755))
	must(t, os.Symlink("up/../f.txt", filepath.Join(f.merged, "w")))
	ch := f.changes(t)
	if !strings.Contains(ch["y"].Refused, `host's symlink x`) {
		t.Errorf("y: refused %q", ch["y"].Refused)
	}
	if ch["w"].Refused != "" || ch["up"].Refused != "" {
		t.Errorf("w: %q, up: %q", ch["w"].Refused, ch["up"].Refused)
	}
	res, err := Apply(context.Background(), f.dir, []string{"w", "y"})
	if err != nil {
		t.Fatal(err)
	}
	refused := map[string]string{}
	for _, r := range res.Refused {
		refused[strings.TrimPrefix(r.Path, "/w/")] = r.Reason
	}
	if len(res.Applied) != 0 || !strings.Contains(refused["w"], "leads outside") || !strings.Contains(refused["y"], "host's symlink x") {
		t.Fatalf("applied %+v, refused %+v", res.Applied, res.Refused)
	}
	if tg, _ := os.Readlink(filepath.Join(f.host, "up")); tg != "." {
		t.Errorf("host up -> %q", tg)
	}
	if res, err = Apply(context.Background(), f.dir, []string{"w", "up"}); err != nil || len(res.Applied) != 2 {
		t.Fatalf("w with up: %+v %v", res, err)
	}
}

// TestReviewBindsEntry is N3 of the second security review: what a
// reviewer saw is the whole entry. A symlink retargeted and a mode changed
// after the review are conflicts naming the path and what it is now, and
// the host gets the reviewed mode.
func TestReviewBindsEntry(t *testing.T) {
	f := newFixture(t, 16<<20, map[string]string{"sub/k": "k\n", "sub/other": "o\n"})
	must(t, os.Symlink("sub/k", filepath.Join(f.merged, "lnk")))
	f.sandboxWrite(t, "mf", "data\n")
	must(t, os.Chmod(filepath.Join(f.merged, "mf"), 0o600))
	shown := f.changes(t)
	for _, p := range []string{"lnk", "mf"} {
		if !strings.HasPrefix(shown[p].Entry, "entry:sha256:") {
			t.Fatalf("%s: entry %q", p, shown[p].Entry)
		}
	}
	// The sandbox changes both after the review.
	must(t, os.Remove(filepath.Join(f.merged, "lnk")))
	must(t, os.Symlink("sub/other", filepath.Join(f.merged, "lnk")))
	must(t, unix.Chmod(filepath.Join(f.merged, "mf"), 0o4777))
	for name, expect := range map[string]map[string]string{
		"entries":                   {"lnk": shown["lnk"].Entry, "mf": shown["mf"].Entry},
		"the review's empty values": {"lnk": "", "mf": shown["mf"].Entry},
	} {
		_, err := ApplyReviewed(context.Background(), f.dir, []string{"lnk", "mf"}, expect)
		var ce *ConflictError
		if !errors.As(err, &ce) || len(ce.Conflicts) != 2 {
			t.Fatalf("%s: apply after the changes: %v", name, err)
		}
		for _, c := range ce.Conflicts {
			want := map[string]string{"/w/lnk": `a symlink to "sub/other"`, "/w/mf": "mode 4777"}[c.Path]
			if !strings.Contains(c.Reason, want) {
				t.Errorf("%s: %s: %q, want it to say %q", name, c.Path, c.Reason, want)
			}
		}
	}
	if _, err := os.Lstat(filepath.Join(f.host, "lnk")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("host lnk: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(f.host, "mf")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("host mf: %v", err)
	}
	// Reviewed as it is now: applied, with that mode (setuid stripped,
	// group and world write cleared).
	now := f.changes(t)
	res, err := ApplyReviewed(context.Background(), f.dir, nil, map[string]string{"lnk": now["lnk"].Entry, "mf": now["mf"].Entry})
	if err != nil || len(res.Applied) != 2 {
		t.Fatalf("apply: %+v %v", res, err)
	}
	if fi, err := os.Lstat(filepath.Join(f.host, "mf")); err != nil || fi.Mode() != 0o755 {
		t.Errorf("host mf: %v %v", fi.Mode(), err)
	}
	if tg, err := os.Readlink(filepath.Join(f.host, "lnk")); err != nil || tg != "sub/other" {
		t.Errorf("host lnk -> %q %v", tg, err)
	}
}

// TestSharedWrite is N6 of the second security review: a directory 2777
// and a file 0666 made in the sandbox were applied as drwxrwxrwx and
// -rw-rw-rw- root files. Apply clears group and world write unless the
// policy allows them, and the review warns.
func TestSharedWrite(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprint("shared=", shared), func(t *testing.T) {
			// g.txt is group-writable on the host already: a new content
			// keeps that.
			f := newFixtureWith(t, 16<<20, map[string]string{"a.txt": "a\n", "g.txt": "g\n"}, func(host string) {
				must(t, os.Chmod(filepath.Join(host, "g.txt"), 0o664))
			})
			f.sandboxWrite(t, "g.txt", "g2\n")
			must(t, os.Mkdir(filepath.Join(f.merged, "sgd"), 0o755))
			must(t, unix.Chmod(filepath.Join(f.merged, "sgd"), 0o2777))
			f.sandboxWrite(t, "sgd/ww", "w\n")
			must(t, unix.Chmod(filepath.Join(f.merged, "sgd/ww"), 0o666))
			must(t, unix.Chmod(filepath.Join(f.merged, "a.txt"), 0o664))
			ch := f.changes(t)
			for p, want := range map[string]string{"sgd": "world-writable (mode 2777)", "sgd/ww": "world-writable (mode 0666)", "a.txt": ""} {
				if got := ch[p].Warning; (want == "") != (got == "") || !strings.Contains(got, want) {
					t.Errorf("%s: warning %q, want %q", p, got, want)
				}
			}
			res, err := ApplyWith(context.Background(), f.dir, ApplyOptions{SharedWrite: shared})
			if err != nil || len(res.Applied) != 4 {
				t.Fatalf("apply: %+v %v", res, err)
			}
			want := map[string]os.FileMode{"sgd": os.ModeDir | 0o755, "sgd/ww": 0o644, "a.txt": 0o644, "g.txt": 0o664}
			if shared {
				want = map[string]os.FileMode{"sgd": os.ModeDir | 0o777, "sgd/ww": 0o666, "a.txt": 0o664, "g.txt": 0o664}
			}
			for p, m := range want {
				if fi, err := os.Lstat(filepath.Join(f.host, p)); err != nil || fi.Mode() != m {
					t.Errorf("host %s: %v, want %v (%v)", p, fi.Mode(), m, err)
				}
			}
			for _, a := range res.Applied {
				if cleared := strings.Contains(a.Note, "group/world write cleared"); cleared != (!shared && a.Path != "/w/g.txt") {
					t.Errorf("%s: note %q", a.Path, a.Note)
				}
			}
		})
	}
}
