package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/termsafe"
)

func digest(b string) string {
	h := sha256.Sum256([]byte(b))
	return "sha256:" + hex.EncodeToString(h[:])
}

func file(p, content string, mode uint32) sandbox.TreeEntry {
	return sandbox.TreeEntry{Path: p, Type: sandbox.EntryFile, Mode: mode, Size: int64(len(content)), Digest: digest(content)}
}

func dir(p string) sandbox.TreeEntry {
	return sandbox.TreeEntry{Path: p, Type: sandbox.EntryDir, Mode: 0o755}
}

func link(p, target string) sandbox.TreeEntry {
	return sandbox.TreeEntry{Path: p, Type: sandbox.EntrySymlink, Mode: 0o777, Target: target}
}

func put(t *testing.T, st Store, ns string, contents ...string) {
	t.Helper()
	for _, c := range contents {
		d, n, err := st.PutBlob(context.Background(), ns, strings.NewReader(c))
		if err != nil || d != digest(c) || n != int64(len(c)) {
			t.Fatalf("PutBlob(%q) = %s, %d, %v", c, d, n, err)
		}
	}
}

func snap(owner string, entries ...sandbox.TreeEntry) *Snapshot {
	s := &Snapshot{Info: Info{ID: NewID(), Owner: owner, Sandbox: "sb-1", Kind: KindManual, Created: time.Now(), Roots: []string{sandbox.Workspace}}, Entries: append([]sandbox.TreeEntry{dir("/workspace")}, entries...)}
	s.Summarize()
	return s
}

func TestLocalStoresContentOncePerKey(t *testing.T) {
	ctx := context.Background()
	dirp := t.TempDir()
	st, err := OpenLocal(dirp)
	if err != nil {
		t.Fatal(err)
	}
	put(t, st, "k1", "hello", "world")
	a := snap("k1", file("/workspace/a", "hello", 0o644), file("/workspace/b", "world", 0o600))
	if err := st.Put(ctx, a); err != nil {
		t.Fatal(err)
	}
	// The same content again costs nothing more.
	put(t, st, "k1", "hello")
	b := snap("k1", file("/workspace/a", "hello", 0o644), file("/workspace/c", "hello", 0o644))
	if err := st.Put(ctx, b); err != nil {
		t.Fatal(err)
	}
	u, err := st.Usage(ctx, "k1")
	if err != nil || u.Snapshots != 2 || u.Bytes != int64(len("hello")+len("world")) {
		t.Fatalf("usage %+v, %v", u, err)
	}
	// Another key cannot name content it did not store.
	if ok, _ := st.HasBlob(ctx, "k2", digest("hello")); ok {
		t.Fatal("key k2 sees key k1's content")
	}
	if err := st.Put(ctx, snap("k2", file("/workspace/a", "hello", 0o644))); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("a snapshot of content its key never stored: %v", err)
	}
	if _, err := st.OpenBlob(ctx, "k2", digest("hello")); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("open another key's content: %v", err)
	}
	// Reopened, everything is still there.
	st2, err := OpenLocal(dirp)
	if err != nil {
		t.Fatal(err)
	}
	got, err := st2.Get(ctx, a.ID)
	if err != nil || len(got.Entries) != 3 || got.Files != 2 {
		t.Fatalf("Get after reopen: %+v, %v", got, err)
	}
	r, err := st2.OpenBlob(ctx, "k1", digest("world"))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(r)
	r.Close()
	if string(data) != "world" {
		t.Fatalf("content %q", data)
	}
	list, _ := st2.List(ctx, "k1")
	if len(list) != 2 || list[0].ID != a.ID {
		t.Fatalf("list %v", list)
	}
	// Deleting a keeps "hello" (b holds it); "world" goes once old enough.
	if err := st2.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if ok, _ := st2.HasBlob(ctx, "k1", digest("hello")); !ok {
		t.Fatal("content still held by b was removed")
	}
	old := time.Now().Add(-2 * blobGrace)
	_ = os.Chtimes(st2.blobPath("k1", digest("world")), old, old)
	if err := st2.Collect(ctx, "k1"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := st2.HasBlob(ctx, "k1", digest("world")); ok {
		t.Fatal("content no snapshot holds was kept")
	}
	if _, err := st2.Get(ctx, a.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("deleted snapshot: %v", err)
	}
}

func TestNamesAndIDs(t *testing.T) {
	for _, bad := range []string{"", "../x", "a/b", "/etc", ".", "..", "-x", "sn-0123456789ab", strings.Repeat("a", 65), "a b", "a\x00"} {
		if CheckName(bad) == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
	for _, good := range []string{"a", "step-7", "before.refactor", "v1_2"} {
		if err := CheckName(good); err != nil {
			t.Errorf("name %q refused: %v", good, err)
		}
	}
	for _, bad := range []string{"sn-../../etc", "sn-0123", "SN-0123456789ab", "sn-0123456789ab/x"} {
		if ValidID(bad) {
			t.Errorf("id %q accepted", bad)
		}
	}
	if CheckLabel("a\nb") == nil || CheckLabel(strings.Repeat("x", MaxLabel+1)) == nil || CheckLabel("before the refactor ✓") != nil {
		t.Error("labels")
	}
	bad := snap("k", sandbox.TreeEntry{Path: "/workspace/../etc/passwd", Type: sandbox.EntryFile, Digest: digest("x")})
	if bad.Check() == nil {
		t.Error("an entry with .. passed Check")
	}
}

func TestCompare(t *testing.T) {
	a := []sandbox.TreeEntry{dir("/workspace"), file("/workspace/a", "1", 0o644), file("/workspace/b", "2", 0o644), link("/workspace/l", "a"), file("/workspace/m", "3", 0o644), dir("/workspace/t")}
	b := []sandbox.TreeEntry{dir("/workspace"), file("/workspace/a", "1", 0o755), file("/workspace/b", "changed", 0o644), link("/workspace/l", "b"), file("/workspace/n", "new", 0o644), file("/workspace/t", "now a file", 0o644)}
	d := Compare("sn-a", "now", a, b)
	var got []string
	for _, c := range d.Changes {
		got = append(got, c.Kind+" "+c.Path)
	}
	want := []string{"mode /workspace/a", "modified /workspace/b", "symlink /workspace/l", "deleted /workspace/m", "added /workspace/n", "type /workspace/t"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("changes %v, want %v", got, want)
	}
	if d.Added != 1 || d.Deleted != 1 || d.Modified != 1 || d.Other != 3 {
		t.Fatalf("counts %+v", d)
	}
	blobs := map[string]string{digest("1"): "1", digest("2"): "2", digest("changed"): "changed", digest("3"): "3", digest("new"): "new", digest("now a file"): "now a file"}
	open := func(_ context.Context, e *sandbox.TreeEntry, _ bool) (io.ReadCloser, error) {
		return io.NopCloser(strings.NewReader(blobs[e.Digest])), nil
	}
	if err := d.AddText(context.Background(), open, DiffLimits{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(d.Changes[1].Unified, "-2\n\\ No newline at end of file\n+changed") {
		t.Fatalf("unified diff:\n%s", d.Changes[1].Unified)
	}
	txt := d.Text()
	if !strings.Contains(txt, "mode     /workspace/a (0644 → 0755)") || !strings.Contains(txt, "symlink  /workspace/l (a → b)") {
		t.Fatalf("text:\n%s", txt)
	}
}

func TestBinaryAndCaps(t *testing.T) {
	bin := "\x00\x01\x02binary"
	big := strings.Repeat("line\n", 100_000)
	a := []sandbox.TreeEntry{dir("/workspace")}
	b := []sandbox.TreeEntry{dir("/workspace"), file("/workspace/big", big, 0o644), file("/workspace/bin", bin, 0o644)}
	d := Compare("sn-a", "now", a, b)
	blobs := map[string]string{digest(bin): bin, digest(big): big}
	open := func(_ context.Context, e *sandbox.TreeEntry, _ bool) (io.ReadCloser, error) {
		return io.NopCloser(strings.NewReader(blobs[e.Digest])), nil
	}
	if err := d.AddText(context.Background(), open, DiffLimits{PerFile: 1000}); err != nil {
		t.Fatal(err)
	}
	if !d.Changes[1].Binary || d.Changes[1].Unified != "" {
		t.Errorf("binary file: %+v", d.Changes[1])
	}
	if !d.Changes[0].Truncated || len(d.Changes[0].Unified) > 1000 || !d.Truncated {
		t.Errorf("big file: truncated %v, %d bytes of diff", d.Changes[0].Truncated, len(d.Changes[0].Unified))
	}
}

// TestUnifiedApplies checks the unified diffs with git apply: applied to
// the old text they give the new one.
func TestUnifiedApplies(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	cases := []struct{ a, b string }{
		{"a\nb\nc\n", "a\nB\nc\n"},
		{"", "new\nfile\n"},
		{"1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n", "0\n1\n2\n3\n4\n5\n6\n7\nx\n8\n9\n10\n11\n12\n13\n15\n16\n"},
		{"no newline", "no newline either"},
		{"x\ny\n", "y\n"},
		{strings.Repeat("same\n", 50) + "end\n", "start\n" + strings.Repeat("same\n", 50)},
	}
	for i, c := range cases {
		dirp := t.TempDir()
		if err := os.WriteFile(filepath.Join(dirp, "f"), []byte(c.a), 0o644); err != nil {
			t.Fatal(err)
		}
		u := Unified("a/f", "b/f", c.a, c.b)
		if c.a == "" {
			os.Remove(filepath.Join(dirp, "f"))
			u = Unified("/dev/null", "b/f", c.a, c.b)
		}
		cmd := exec.Command("git", "apply", "--unidiff-zero", "-")
		cmd.Dir = dirp
		cmd.Stdin = strings.NewReader(u)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("case %d: git apply: %v: %s\n%s", i, err, out, u)
		}
		got, _ := os.ReadFile(filepath.Join(dirp, "f"))
		if !bytes.Equal(got, []byte(c.b)) {
			t.Fatalf("case %d: applied diff gives %q, want %q\n%s", i, got, c.b, u)
		}
	}
}

// TestTextShowsControls: the review's N4. A changed file's content (and
// its name, and a symlink's target) cannot write terminal escapes through
// the text of a diff: each control, bidi or zero-width character shows as
// ⟨U+XXXX⟩, and the file is marked.
func TestTextShowsControls(t *testing.T) {
	esc := "line1\n\x1b]0;PWNED-TITLE\x07\x1b[1A\x1b[2Kharmless line\n"
	a := []sandbox.TreeEntry{dir("/w")}
	b := []sandbox.TreeEntry{dir("/w"), file("/w/colors\x1b[2K.txt", esc, 0o644), {Path: "/w/l\u202e", Type: sandbox.EntrySymlink, Target: "x\u200b\ny"}}
	d := Compare("sn-a", "now", a, b)
	open := func(_ context.Context, e *sandbox.TreeEntry, _ bool) (io.ReadCloser, error) {
		return io.NopCloser(strings.NewReader(esc)), nil
	}
	if err := d.AddText(context.Background(), open, DiffLimits{}); err != nil {
		t.Fatal(err)
	}
	txt := d.Text()
	for _, r := range txt {
		if r != '\n' && r != '\t' && termsafe.Hidden(r) {
			t.Fatalf("the text holds %U:\n%s", r, txt)
		}
	}
	for _, want := range []string{
		"+⟨U+001B⟩]0;PWNED-TITLE⟨U+0007⟩⟨U+001B⟩[1A⟨U+001B⟩[2Kharmless line\n",
		"added    /w/colors⟨U+001B⟩[2K.txt (file, 44 bytes, control characters)\n",
		"\\ /w/colors⟨U+001B⟩[2K.txt: 4 control or invisible characters",
		"/w/l⟨U+202E⟩ (symlink → x⟨U+200B⟩⟨U+000A⟩y)",
	} {
		if !strings.Contains(txt, want) {
			t.Errorf("the text lacks %q:\n%s", want, txt)
		}
	}
}
