package fsroot

import (
	"errors"
	"path"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

func TestCleanPath(t *testing.T) {
	tests := []struct {
		name    string
		workdir string
		in      string
		want    string
		wantErr error
	}{
		{name: "absolute", workdir: "/workspace", in: "/etc/passwd", want: "/etc/passwd"},
		{name: "relative", workdir: "/workspace", in: "a/b.txt", want: "/workspace/a/b.txt"},
		{name: "dot", workdir: "/workspace", in: ".", want: "/workspace"},
		{name: "root", workdir: "/workspace", in: "/", want: "/"},
		{name: "many slashes", workdir: "/workspace", in: "//a///b//", want: "/a/b"},
		{name: "dot-dot inside", workdir: "/workspace", in: "a/../b", want: "/workspace/b"},
		{name: "relative up to a sibling", workdir: "/workspace", in: "../tmp/x", want: "/tmp/x"},
		{name: "relative up to the root", workdir: "/workspace", in: "..", want: "/"},
		{name: "absolute dot-dot inside", workdir: "/", in: "/a/b/../../c", want: "/c"},
		{name: "dots in names", workdir: "/", in: "/...a/..b/c..", want: "/...a/..b/c.."},
		{name: "relative from root workdir", workdir: "/", in: "x", want: "/x"},
		{name: "relative escape", workdir: "/", in: "../x", wantErr: sandbox.ErrOutside},
		{name: "relative escape past workdir", workdir: "/workspace", in: "../../x", wantErr: sandbox.ErrOutside},
		{name: "absolute escape", workdir: "/workspace", in: "/../../etc/passwd", wantErr: sandbox.ErrOutside},
		{name: "escape in the middle", workdir: "/", in: "a/../../b", wantErr: sandbox.ErrOutside},
		{name: "escape then back in", workdir: "/", in: "/../workspace", wantErr: sandbox.ErrOutside},
		{name: "bare dot-dot at root", workdir: "/", in: "/..", wantErr: sandbox.ErrOutside},
		{name: "empty", workdir: "/workspace", in: "", wantErr: sandbox.ErrInvalid},
		{name: "NUL byte", workdir: "/workspace", in: "a\x00b", wantErr: sandbox.ErrInvalid},
		{name: "too long", workdir: "/", in: strings.Repeat("a/", maxPath), wantErr: sandbox.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := cleanPath(tt.workdir, tt.in)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("cleanPath(%q, %q) = %q, %v; want error %v", tt.workdir, tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("cleanPath(%q, %q) = %q, %v; want %q", tt.workdir, tt.in, got, err, tt.want)
			}
		})
	}
}

func TestSplitPath(t *testing.T) {
	tests := []struct {
		in              string
		clean, dir, nam string
		wantErr         error
	}{
		{in: "a.txt", clean: "/workspace/a.txt", dir: "/workspace", nam: "a.txt"},
		{in: "/top", clean: "/top", dir: "/", nam: "top"},
		{in: "d/sub/", clean: "/workspace/d/sub", dir: "/workspace/d", nam: "sub"},
		{in: "/", wantErr: sandbox.ErrInvalid},
		{in: ".", wantErr: sandbox.ErrInvalid},
		{in: "..", wantErr: sandbox.ErrInvalid},
		{in: "x/..", wantErr: sandbox.ErrInvalid},
		{in: "x/../", wantErr: sandbox.ErrInvalid},
		{in: "/workspace/.", wantErr: sandbox.ErrInvalid},
		{in: "../../..", wantErr: sandbox.ErrOutside},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			clean, dir, name, err := splitPath("/workspace", tt.in)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("splitPath(%q) = %q, %q, %q, %v; want error %v", tt.in, clean, dir, name, err, tt.wantErr)
				}
				return
			}
			if err != nil || clean != tt.clean || dir != tt.dir || name != tt.nam {
				t.Fatalf("splitPath(%q) = %q, %q, %q, %v; want %q, %q, %q", tt.in, clean, dir, name, err, tt.clean, tt.dir, tt.nam)
			}
		})
	}
}

// FuzzPath checks that an accepted path always stays inside the root: it is
// clean, absolute and has no ".." element, and that refusals are the right
// ones.
func FuzzPath(f *testing.F) {
	for _, s := range []string{"a", "/a/b", "../x", "/../../etc/passwd", "a/../../b", ".", "..", "/", "", "a\x00", "x/..", "//..//a", "./../."} {
		f.Add("/workspace", s)
		f.Add("/", s)
	}
	f.Fuzz(func(t *testing.T, workdir, p string) {
		wd, err := cleanPath("/", workdir)
		if err != nil || !strings.HasPrefix(workdir, "/") {
			return // Open refuses such a workdir
		}
		got, err := cleanPath(wd, p)
		if err != nil {
			switch {
			case errors.Is(err, sandbox.ErrOutside):
				if !strings.Contains(p, "..") {
					t.Fatalf("cleanPath(%q, %q): %v, but the path has no \"..\"", wd, p, err)
				}
			case errors.Is(err, sandbox.ErrInvalid):
				if p != "" && !strings.Contains(p, "\x00") && len(p) <= maxPath {
					t.Fatalf("cleanPath(%q, %q): %v, for a valid path", wd, p, err)
				}
			default:
				t.Fatalf("cleanPath(%q, %q): unexpected error class: %v", wd, p, err)
			}
			return
		}
		if !strings.HasPrefix(got, "/") || path.Clean(got) != got {
			t.Fatalf("cleanPath(%q, %q) = %q: not clean and absolute", wd, p, got)
		}
		for elem := range strings.SplitSeq(got, "/") {
			if elem == ".." {
				t.Fatalf("cleanPath(%q, %q) = %q: has a \"..\"", wd, p, got)
			}
		}
		if strings.Contains(got, "\x00") {
			t.Fatalf("cleanPath(%q, %q) = %q: has a NUL byte", wd, p, got)
		}
		// Joined onto a host directory, it stays below that directory.
		if host := path.Join("/host/root", got); host != "/host/root" && !strings.HasPrefix(host, "/host/root/") {
			t.Fatalf("cleanPath(%q, %q) = %q: joins to %q, outside the root", wd, p, got, host)
		}
		// Clean input is a fixed point.
		if again, err := cleanPath("/", got); err != nil || again != got {
			t.Fatalf("cleanPath(%q) = %q, %v; want it unchanged", got, again, err)
		}
		if clean, dir, name, err := splitPath(wd, p); err == nil {
			if clean != got || path.Join(dir, name) != got || name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
				t.Fatalf("splitPath(%q, %q) = %q, %q, %q; inconsistent with %q", wd, p, clean, dir, name, got)
			}
		}
	})
}
