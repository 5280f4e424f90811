package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func linksTar(t *testing.T, names []string, links map[string]string) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeSymlink, Linkname: links[n], Mode: 0o777}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &b
}

// noLinks says dir holds no symlink.
func noLinks(t *testing.T, dir string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type()&os.ModeSymlink != 0 {
			t.Errorf("%s was made", p)
		}
		return nil
	})
}

// TestUntarSymlinkChain is N2 of the second security review: `airlock
// sandbox cp ID:DIR out` made x -> y/y/../../etc/passwd and y -> . (listed
// in that order), and out/x resolved to /etc/passwd.
func TestUntarSymlinkChain(t *testing.T) {
	links := map[string]string{"x": strings.Repeat("y/", 10) + strings.Repeat("../", 10) + "etc/passwd", "y": "."}
	out := filepath.Join(t.TempDir(), "out")
	err := untar(linksTar(t, []string{"x", "y"}, links), out)
	if err == nil || !strings.Contains(err.Error(), "climbs above") {
		t.Fatalf("untar: %v; want the chain refused", err)
	}
	noLinks(t, out)

	// A link already in the destination counts too.
	dir := t.TempDir()
	if err := os.Symlink(".", filepath.Join(dir, "y")); err != nil {
		t.Fatal(err)
	}
	if err := untar(linksTar(t, []string{"x"}, map[string]string{"x": "y/y/../../outside"}), dir); err == nil {
		t.Fatal("a chain through a link already in the destination was made")
	}
	if err := untar(linksTar(t, []string{"ok"}, map[string]string{"ok": "y/y/inside"}), dir); err != nil {
		t.Fatalf("a harmless link through y: %v", err)
	}
}

// TestUntarVectors runs the shared symlink vectors (internal/symlink,
// the Python SDK) through the CLI's unpacker: every link of a case that
// escapes is refused, the checked link listed first.
func TestUntarVectors(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "symlink-vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Cases []struct {
			Name  string            `json:"name"`
			Links map[string]string `json:"links"`
			Check string            `json:"check"`
			Chain int               `json:"chain"`
			OK    bool              `json:"ok"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	for _, v := range f.Cases {
		t.Run(v.Name, func(t *testing.T) {
			if v.Chain > 0 {
				v.Links, v.Check = map[string]string{}, "l0"
				for j := 0; j < v.Chain; j++ {
					v.Links[fmt.Sprintf("l%d", j)] = fmt.Sprintf("l%d", j+1)
				}
				v.Links[fmt.Sprintf("l%d", v.Chain-1)] = "end"
			}
			names := []string{v.Check}
			for n := range v.Links {
				if n != v.Check {
					names = append(names, n)
				}
			}
			out := filepath.Join(t.TempDir(), "out")
			err := untar(linksTar(t, names, v.Links), out)
			if v.OK {
				// The archive checker (shared with uploads) also refuses
				// a target through a link made earlier in the archive.
				if err != nil && !strings.Contains(err.Error(), "another symlink") {
					t.Fatalf("untar: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("an escaping link was made")
			}
			noLinks(t, out)
		})
	}
}
