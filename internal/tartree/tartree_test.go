package tartree

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestWrite: files with their modes, a directory, a symlink stored as a
// link (not followed), and a second name of a file as a hard link to the
// first, with no host user names.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "sub"), 0o750))
	must(os.WriteFile(filepath.Join(dir, "sub", "a"), []byte("hello"), 0o640))
	must(os.Link(filepath.Join(dir, "sub", "a"), filepath.Join(dir, "b")))
	must(os.Symlink("/etc/passwd", filepath.Join(dir, "link")))

	var buf bytes.Buffer
	must(Write(dir, &buf))
	got := map[string]*tar.Header{}
	body := map[string]string{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		must(err)
		got[h.Name] = h
		b, err := io.ReadAll(tr)
		must(err)
		body[h.Name] = string(b)
		if h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: user %q group %q: want no names", h.Name, h.Uname, h.Gname)
		}
	}
	if len(got) != 4 {
		t.Fatalf("entries %v, want b, link, sub/, sub/a", got)
	}
	if h := got["sub/"]; h == nil || h.Typeflag != tar.TypeDir || h.Mode&0o777 != 0o750 {
		t.Errorf("sub/: %+v", h)
	}
	if h := got["link"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "/etc/passwd" {
		t.Errorf("link: %+v", h)
	}
	// WalkDir goes in lexical order: b is the first name, sub/a the link.
	if h := got["b"]; h == nil || h.Typeflag != tar.TypeReg || body["b"] != "hello" || h.Mode&0o777 != 0o640 {
		t.Errorf("b: %+v %q", h, body["b"])
	}
	if h := got["sub/a"]; h == nil || h.Typeflag != tar.TypeLink || h.Linkname != "b" || h.Size != 0 {
		t.Errorf("sub/a: %+v", h)
	}
}

// TestWriteMissing: a root that is not there is an error, not an empty
// archive.
func TestWriteMissing(t *testing.T) {
	if err := Write(filepath.Join(t.TempDir(), "none"), io.Discard); err == nil {
		t.Fatal("want an error for a missing root")
	}
}
