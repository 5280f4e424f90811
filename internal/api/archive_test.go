package api

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestArchiveChecker(t *testing.T) {
	type h = tar.Header
	small := ArchiveLimits{MaxEntries: 4, MaxFileBytes: 100, MaxTotalBytes: 150}
	for _, tc := range []struct {
		name    string
		limits  ArchiveLimits
		entries []h
		// refused is the index of the first refused entry, -1 for none.
		refused int
		why     string
	}{
		{"plain tree", ArchiveLimits{}, []h{{Name: "./", Typeflag: tar.TypeDir}, {Name: "a/", Typeflag: tar.TypeDir}, {Name: "a/b.txt", Typeflag: tar.TypeReg, Size: 3}, {Name: "c", Typeflag: '\x00'}}, -1, ""},
		{"internal symlink", ArchiveLimits{}, []h{{Name: "a/b", Typeflag: tar.TypeSymlink, Linkname: "../c"}, {Name: "d", Typeflag: tar.TypeSymlink, Linkname: "a/./x"}}, -1, ""},
		{"dotdot", ArchiveLimits{}, []h{{Name: "../x", Typeflag: tar.TypeReg}}, 0, `".."`},
		{"dotdot inside", ArchiveLimits{}, []h{{Name: "a/../../x", Typeflag: tar.TypeReg}}, 0, `".."`},
		{"dotdot that cleans inside", ArchiveLimits{}, []h{{Name: "a/../x", Typeflag: tar.TypeReg}}, 0, `".."`},
		{"absolute", ArchiveLimits{}, []h{{Name: "/etc/passwd", Typeflag: tar.TypeReg}}, 0, "absolute"},
		{"empty name", ArchiveLimits{}, []h{{Name: "", Typeflag: tar.TypeReg}}, 0, "empty"},
		{"NUL", ArchiveLimits{}, []h{{Name: "a\x00b", Typeflag: tar.TypeReg}}, 0, "NUL"},
		{"file as root", ArchiveLimits{}, []h{{Name: "./", Typeflag: tar.TypeReg}}, 0, "extraction directory"},
		{"symlink out", ArchiveLimits{}, []h{{Name: "a/l", Typeflag: tar.TypeSymlink, Linkname: "../../x"}}, 0, "outside"},
		{"symlink absolute", ArchiveLimits{}, []h{{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc"}}, 0, "absolute"},
		{"symlink empty", ArchiveLimits{}, []h{{Name: "l", Typeflag: tar.TypeSymlink}}, 0, "empty target"},
		{"write through symlink", ArchiveLimits{}, []h{{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "d"}, {Name: "l/x", Typeflag: tar.TypeReg}}, 1, "goes through the symlink"},
		{"replace symlink", ArchiveLimits{}, []h{{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "d"}, {Name: "l", Typeflag: tar.TypeReg}}, 1, "replaces"},
		{"symlink replaces file", ArchiveLimits{}, []h{{Name: "f", Typeflag: tar.TypeReg}, {Name: "f", Typeflag: tar.TypeSymlink, Linkname: "g"}}, 1, "replace an entry"},
		{"symlink chain out", ArchiveLimits{}, []h{{Name: "a/b/s", Typeflag: tar.TypeSymlink, Linkname: "../.."}, {Name: "a/b/t", Typeflag: tar.TypeSymlink, Linkname: "s/../.."}}, 1, "another symlink"},
		{"hard link", ArchiveLimits{}, []h{{Name: "f", Typeflag: tar.TypeReg}, {Name: "g", Typeflag: tar.TypeLink, Linkname: "f"}}, 1, "hard links"},
		{"char device", ArchiveLimits{}, []h{{Name: "null", Typeflag: tar.TypeChar}}, 0, "device"},
		{"block device", ArchiveLimits{}, []h{{Name: "sda", Typeflag: tar.TypeBlock}}, 0, "device"},
		{"fifo", ArchiveLimits{}, []h{{Name: "p", Typeflag: tar.TypeFifo}}, 0, "FIFO"},
		{"sparse", ArchiveLimits{}, []h{{Name: "s", Typeflag: tar.TypeGNUSparse}}, 0, "not allowed"},
		{"file at the size limit", small, []h{{Name: "f", Typeflag: tar.TypeReg, Size: 100}}, -1, ""},
		{"file past the size limit", small, []h{{Name: "f", Typeflag: tar.TypeReg, Size: 101}}, 0, "at most 100"},
		{"total past the limit", small, []h{{Name: "f", Typeflag: tar.TypeReg, Size: 100}, {Name: "g", Typeflag: tar.TypeReg, Size: 51}}, 1, "together"},
		{"too many entries", small, []h{{Name: "a/", Typeflag: tar.TypeDir}, {Name: "b/", Typeflag: tar.TypeDir}, {Name: "c/", Typeflag: tar.TypeDir}, {Name: "d/", Typeflag: tar.TypeDir}, {Name: "e/", Typeflag: tar.TypeDir}}, 4, "more than 4"},
		{"negative size", ArchiveLimits{}, []h{{Name: "f", Typeflag: tar.TypeReg, Size: -1}}, 0, "negative"},
		{"global header skipped", small, []h{{Typeflag: tar.TypeXGlobalHeader}, {Name: "f", Typeflag: tar.TypeReg}}, -1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewArchiveChecker(tc.limits)
			for i := range tc.entries {
				e, err := c.Check(&tc.entries[i])
				if i == tc.refused {
					var ae *ArchiveError
					if !errors.As(err, &ae) || !strings.Contains(err.Error(), tc.why) {
						t.Fatalf("entry %d: %v, want refused for %q", i, err, tc.why)
					}
					return
				}
				if err != nil {
					t.Fatalf("entry %d refused: %v", i, err)
				}
				checkAccepted(t, e)
			}
			if tc.refused >= 0 {
				t.Fatalf("entry %d was accepted", tc.refused)
			}
		})
	}
}

func TestArchiveCheckerModes(t *testing.T) {
	e, err := NewArchiveChecker(ArchiveLimits{}).Check(&tar.Header{Name: "f", Typeflag: tar.TypeReg, Mode: 0o7777})
	if err != nil || e.Mode != 0o777 {
		t.Fatalf("mode %o, %v: setuid, setgid and sticky must go", e.Mode, err)
	}
}

// checkAccepted asserts what every accepted entry must satisfy.
func checkAccepted(t *testing.T, e Entry) {
	t.Helper()
	if e.Kind == EntrySkip {
		return
	}
	const base = "/x/dest"
	dest := path.Join(base, e.Name)
	if !strings.HasPrefix(dest, base+"/") || strings.HasPrefix(e.Name, "/") || e.Name != path.Clean(e.Name) {
		t.Fatalf("accepted name %q leaves the directory (%s)", e.Name, dest)
	}
	for _, p := range strings.Split(e.Name, "/") {
		if p == ".." {
			t.Fatalf("accepted name %q with ..", e.Name)
		}
	}
	if e.Kind == EntrySymlink {
		target := path.Join(path.Dir(dest), e.Target)
		if !strings.HasPrefix(target+"/", base+"/") || strings.HasPrefix(e.Target, "/") {
			t.Fatalf("accepted symlink %q -> %q leaves the directory", e.Name, e.Target)
		}
	}
	if e.Mode&^0o777 != 0 || e.Size < 0 {
		t.Fatalf("accepted entry %+v", e)
	}
}

func tarOf(hs ...tar.Header) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hs {
		_ = tw.WriteHeader(&h)
		if h.Typeflag == tar.TypeReg && h.Size > 0 {
			_, _ = tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	_ = tw.Close()
	return b.Bytes()
}

// FuzzArchive feeds arbitrary bytes as a tar stream to the checker: it must
// not panic, and nothing it accepts may leave the extraction directory.
// Its seed corpus runs as a normal test.
func FuzzArchive(f *testing.F) {
	f.Add(tarOf(tar.Header{Name: "a/", Typeflag: tar.TypeDir}, tar.Header{Name: "a/b", Typeflag: tar.TypeReg, Size: 5}))
	f.Add(tarOf(tar.Header{Name: "../../etc/passwd", Typeflag: tar.TypeReg, Size: 1}))
	f.Add(tarOf(tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../x"}, tar.Header{Name: "l/y", Typeflag: tar.TypeReg}))
	f.Add(tarOf(tar.Header{Name: "a/b/s", Typeflag: tar.TypeSymlink, Linkname: "../.."}, tar.Header{Name: "a/b/t", Typeflag: tar.TypeSymlink, Linkname: "s/../.."}))
	f.Add(tarOf(tar.Header{Name: "dev", Typeflag: tar.TypeChar}, tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "/etc/shadow"}))
	f.Add(tarOf(tar.Header{Name: strings.Repeat("a/", 100) + "x", Typeflag: tar.TypeReg, Format: tar.FormatPAX}))
	f.Add([]byte("not a tar"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tr := tar.NewReader(bytes.NewReader(data))
		c := NewArchiveChecker(ArchiveLimits{MaxEntries: 50, MaxFileBytes: 1 << 20, MaxTotalBytes: 2 << 20})
		made := map[string]bool{}
		links := map[string]bool{}
		for {
			h, err := tr.Next()
			if err != nil {
				if errors.Is(err, io.EOF) {
					return
				}
				return // malformed archives are refused by the reader
			}
			e, err := c.Check(h)
			if err != nil {
				return // the upload stops at the first refused entry
			}
			checkAccepted(t, e)
			if e.Kind == EntrySkip {
				continue
			}
			// Nothing accepted is below or replaces a symlink of the archive.
			// (Each link is tried as a prefix: at most 50 entries, and no
			// quadratic walk to slow the fuzzer down on deep names.)
			for l := range links {
				if e.Name == l || strings.HasPrefix(e.Name, l+"/") {
					t.Fatalf("entry %q accepted through the symlink %q", e.Name, l)
				}
			}
			if e.Kind == EntrySymlink {
				if made[e.Name] {
					t.Fatalf("symlink %q replaces an entry", e.Name)
				}
				links[e.Name] = true
			}
			made[e.Name] = true
		}
	})
}

// FuzzCheckPath: a path CheckPath accepts has no ".." component, no NUL,
// and is at most maxPath bytes.
func FuzzCheckPath(f *testing.F) {
	for _, s := range []string{"/workspace/a", "a/b", "..", "/workspace/../etc", "a/..", "a\x00b", "....", "/./.", "\xff", strings.Repeat("a", maxPath+1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if CheckPath(p) != nil {
			return
		}
		if p == "" || len(p) > maxPath || strings.IndexByte(p, 0) >= 0 {
			t.Fatalf("accepted %q", p)
		}
		for _, part := range strings.Split(p, "/") {
			if part == ".." {
				t.Fatalf("accepted %q with a .. component", p)
			}
		}
		if c := path.Clean("/workspace/" + p); strings.HasPrefix(p, "/") == false && !strings.HasPrefix(c, "/workspace") {
			t.Fatalf("relative path %q cleans to %q, outside /workspace", p, c)
		}
	})
}

// TestArchiveCheckerDeepNames: checking an entry costs time in proportion
// to its name and target, not to their square: an archive of deep paths
// (the fuzzer found 2000 components per name) is checked at once. The old
// checker joined every prefix of every name, about 40 ms an entry of 2000
// components, so one 10000-entry upload held a core for minutes. The
// bound is far above the linear cost and far below the quadratic one.
func TestArchiveCheckerDeepNames(t *testing.T) {
	c := NewArchiveChecker(ArchiveLimits{})
	deep := strings.Repeat("d/", 2000)
	start := time.Now()
	for i := 0; i < 200; i++ {
		if _, err := c.Check(&tar.Header{Name: deep + "f" + strconv.Itoa(i), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Check(&tar.Header{Name: "l" + strconv.Itoa(i), Typeflag: tar.TypeSymlink, Linkname: deep + "x"}); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("400 entries of 2000 components took %v to check", took)
	}
	// What the walk must still find, at any depth.
	if _, err := c.Check(&tar.Header{Name: "l7/x", Typeflag: tar.TypeReg}); err == nil {
		t.Fatal("an entry through a symlink of the archive was accepted")
	}
	if _, err := c.Check(&tar.Header{Name: deep + "s", Typeflag: tar.TypeSymlink, Linkname: "y"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Check(&tar.Header{Name: deep + "s/z", Typeflag: tar.TypeReg}); err == nil {
		t.Fatal("an entry through a deep symlink of the archive was accepted")
	}
	if _, err := c.Check(&tar.Header{Name: "t", Typeflag: tar.TypeSymlink, Linkname: deep + "s/z"}); err == nil {
		t.Fatal("a symlink whose target goes through a deep symlink was accepted")
	}
}
