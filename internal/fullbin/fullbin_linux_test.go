package fullbin

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

// program is what the tests install: a script standing for airlock.
const program = "#!/bin/sh\necho complete \"$@\"\n"

func packed(t *testing.T) fstest.MapFS {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(program)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return fstest.MapFS{"bin/airlock.gz": {Data: b.Bytes()}}
}

const sum = "0123456789abcdef0123456789abcdef"

func TestInstall(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bin")
	p, err := install(packed(t), dir, sum)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "airlock-0123456789abcdef"); p != want {
		t.Errorf("installed at %s, want %s", p, want)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o555 {
		t.Fatalf("installed file: %v, %v; want mode 0555", fi, err)
	}
	out, err := exec.Command(p, "serve").Output()
	if err != nil || string(out) != "complete serve\n" {
		t.Fatalf("run the installed program: %q, %v", out, err)
	}
	// Installed once: a second install with nothing to unpack finds it.
	if p2, err := install(fstest.MapFS{}, dir, sum); err != nil || p2 != p {
		t.Errorf("second install: %s, %v; want %s", p2, err, p)
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, ".airlock-*")); len(tmp) > 0 {
		t.Errorf("temporary files left: %q", tmp)
	}
}

// TestInstallRemovesStale: other versions unused for a week go when a new
// one is installed; recent ones stay (a daemon of that version may run).
func TestInstallRemovesStale(t *testing.T) {
	dir := t.TempDir()
	old, recent := filepath.Join(dir, "airlock-1111111111111111"), filepath.Join(dir, "airlock-2222222222222222")
	for _, p := range []string{old, recent} {
		if err := os.WriteFile(p, []byte(program), 0o555); err != nil {
			t.Fatal(err)
		}
	}
	weekAgo := time.Now().Add(-stale - time.Hour)
	if err := os.Chtimes(old, weekAgo, weekAgo); err != nil {
		t.Fatal(err)
	}
	if _, err := install(packed(t), dir, sum); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a version unused for a week is still there: %v", err)
	}
	if _, err := os.Stat(recent); err != nil {
		t.Errorf("a recently used version was removed: %v", err)
	}
}

// TestInstallRefusesOpenDir: a directory others can write is refused, and
// nothing in it is run.
func TestInstallRefusesOpenDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	_, err := install(packed(t), dir, sum)
	if err == nil || !strings.Contains(err.Error(), "writable by nobody else") {
		t.Fatalf("install into a world-writable directory: %v, want a refusal", err)
	}
}

func TestInstallWithoutProgram(t *testing.T) {
	if _, err := install(fstest.MapFS{}, t.TempDir(), sum); err == nil || !strings.Contains(err.Error(), "not embedded") {
		t.Fatalf("install with nothing embedded: %v", err)
	}
	if _, err := install(packed(t), t.TempDir(), "short"); err == nil {
		t.Fatal("install with a short checksum: no error")
	}
}

// TestInMemory: where nothing can be installed, the program runs from
// memory.
func TestInMemory(t *testing.T) {
	// A program, not a script: a script's interpreter opens its path
	// after exec has closed the memory file's descriptor.
	echo, err := os.ReadFile("/bin/echo")
	if err != nil {
		t.Skip("no /bin/echo to stand for airlock")
	}
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write(echo); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	p, err := inMemory(fstest.MapFS{"bin/airlock.gz": {Data: b.Bytes()}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(p, "complete", "mcp").Output()
	if err != nil || string(out) != "complete mcp\n" {
		t.Fatalf("run the program from memory: %q, %v", out, err)
	}
}

// TestBeside: the front runs the complete airlock installed with it (make
// build's bin/, the Debian package's /usr/lib/airlock) before any embedded
// copy, and never one that others may write.
func TestBeside(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]os.FileMode // below the root: the front is usr/bin/airlock
		want  string                 // "" when none is run
	}{
		{name: "make build", files: map[string]os.FileMode{"usr/bin/airlock-full": 0o755}, want: "usr/bin/airlock-full"},
		{name: "debian package", files: map[string]os.FileMode{"usr/lib/airlock/airlock-full": 0o755}, want: "usr/lib/airlock/airlock-full"},
		{name: "beside first", files: map[string]os.FileMode{"usr/bin/airlock-full": 0o755, "usr/lib/airlock/airlock-full": 0o755}, want: "usr/bin/airlock-full"},
		{name: "none", files: map[string]os.FileMode{}},
		{name: "not executable", files: map[string]os.FileMode{"usr/bin/airlock-full": 0o644}},
		{name: "others may write it", files: map[string]os.FileMode{"usr/bin/airlock-full": 0o757}},
		{name: "its group may write it", files: map[string]os.FileMode{"usr/lib/airlock/airlock-full": 0o775}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for _, d := range []string{"usr/bin", "usr/lib/airlock"} {
				if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for p, mode := range tt.files {
				p = filepath.Join(root, p)
				if err := os.WriteFile(p, []byte(program), mode); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(p, mode); err != nil { // past the umask
					t.Fatal(err)
				}
			}
			got, ok := Beside(filepath.Join(root, "usr/bin/airlock"))
			switch {
			case tt.want == "" && ok:
				t.Errorf("Beside = %q, want none", got)
			case tt.want != "" && got != filepath.Join(root, tt.want):
				t.Errorf("Beside = %q, %v; want %q", got, ok, filepath.Join(root, tt.want))
			}
		})
	}
}
