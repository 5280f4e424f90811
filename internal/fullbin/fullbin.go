// Package fullbin holds the complete airlock program inside the airlock
// that `make` builds, and runs it.
//
// That airlock is a front (docs/decisions.md, 37 and 47): a small program with what a
// one-shot `airlock run` on the native and gVisor drivers needs, and
// `--version`. Every other command, and a run the front cannot do, it
// hands to the complete program by exec: the daemon, the client, the
// other drivers and CEL link packages whose initialisation alone cost
// every start of airlock 7 ms. The complete program (cmd/airlock-full)
// is installed beside the front (make build, the Debian package); a
// front downloaded alone embeds it compressed and installs it on first
// use, named by its checksum.
package fullbin

import (
	"compress/gzip"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

//go:embed all:bin
var embedded embed.FS

const (
	// Env names the variable that points at a complete airlock to run
	// instead of the embedded one (for development and tests).
	Env = "AIRLOCK_FULL"
	// EnvFront names the variable through which the complete airlock
	// learns the path of the front that ran it (`airlock bench` times the
	// front's `airlock run`).
	EnvFront = "AIRLOCK_FRONT"
)

// Dir is where the complete airlock is installed; empty means DefaultDir.
var Dir = ""

// DefaultDir is /var/cache/airlock/bin for root (a cache: what is
// removed is installed again), else the user's cache
// directory's airlock/bin.
func DefaultDir() (string, error) {
	if os.Geteuid() == 0 {
		return "/var/cache/airlock/bin", nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no directory to install airlock's complete program in: %w (set %s to an airlock built with `go build ./cmd/airlock-full`)", err, Env)
	}
	return filepath.Join(d, "airlock", "bin"), nil
}

// Exec runs the complete airlock in this process's place with argv
// (argv[0] included) and the environment, plus EnvFront. It returns only
// when it could not.
func Exec(argv []string) error {
	p, err := Path()
	if err != nil {
		return err
	}
	env := os.Environ()
	if self, err := os.Executable(); err == nil && os.Getenv(EnvFront) == "" {
		env = append(env, EnvFront+"="+self)
	}
	if err := syscall.Exec(p, argv, env); err != nil {
		return fmt.Errorf("run the complete airlock %s: %w", p, err)
	}
	return nil
}

// Path returns the path of the complete airlock: the one installed beside
// the front (Beside), else the embedded one, installed first when it is
// not installed yet (the single-file download).
func Path() (string, error) {
	if p := os.Getenv(Env); p != "" {
		return p, nil
	}
	if self, err := os.Executable(); err == nil {
		if p, ok := Beside(self); ok {
			return p, nil
		}
	}
	sum, err := embedded.ReadFile("bin/airlock.sha256")
	if errors.Is(err, fs.ErrNotExist) {
		return "", errors.New("this airlock front was built without the complete airlock and finds no " + Name + " beside it: build both with `make build`, or set " + Env + " to an airlock built with `go build ./cmd/airlock-full`")
	}
	if err != nil {
		return "", err
	}
	dir := Dir
	if dir == "" {
		if dir, err = DefaultDir(); err != nil {
			return "", err
		}
	}
	p, err := install(embedded, dir, strings.TrimSpace(string(sum)))
	if errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
		// A read-only root (a container's): unpack it into memory, for
		// this process only.
		return inMemory(embedded)
	}
	return p, err
}

// Name is the complete airlock's file name where it is installed beside
// the front.
const Name = "airlock-full"

// Beside returns the complete airlock installed with the front at self:
// in the same directory (bin/airlock-full beside bin/airlock, as make
// builds them) or in ../lib/airlock (/usr/lib/airlock/airlock-full beside
// /usr/bin/airlock, as the Debian package installs them). A file that
// belongs to neither root nor this user, or that others may write, is not
// run.
func Beside(self string) (string, bool) {
	dir := filepath.Dir(self)
	for _, p := range []string{filepath.Join(dir, Name), filepath.Join(dir, "..", "lib", "airlock", Name)} {
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 || fi.Mode().Perm()&0o022 != 0 {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || (st.Uid != 0 && int(st.Uid) != os.Geteuid()) {
			continue
		}
		return filepath.Clean(p), true
	}
	return "", false
}

// unpack writes the complete airlock fsys holds to w.
func unpack(fsys fs.FS, w io.Writer) error {
	gz, err := fsys.Open("bin/airlock.gz")
	if err != nil {
		return fmt.Errorf("the complete airlock is not embedded: %w", err)
	}
	defer gz.Close()
	zr, err := gzip.NewReader(gz)
	if err != nil {
		return err
	}
	_, err = io.Copy(w, zr) //nolint:gosec // our own program, its size known at build time
	return err
}

// install puts the complete airlock fsys holds (bin/airlock.gz), whose
// SHA-256 is sum, into dir unless it is there, and returns its path.
func install(fsys fs.FS, dir, sum string) (string, error) {
	if len(sum) < 16 {
		return "", errors.New("the complete airlock's checksum is too short")
	}
	dst := filepath.Join(dir, "airlock-"+sum[:16])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("install the complete airlock: %w", err)
	}
	if err := ownedDir(dir); err != nil {
		return "", err
	}
	if fi, err := os.Stat(dst); err == nil && fi.Mode().IsRegular() {
		touch(dst, fi)
		return dst, nil
	}
	if _, err := fs.Stat(fsys, "bin/airlock.gz"); err != nil {
		return "", fmt.Errorf("the complete airlock is not embedded: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".airlock-*")
	if err != nil {
		return "", fmt.Errorf("install the complete airlock: %w", err)
	}
	defer os.Remove(tmp.Name())
	err = unpack(fsys, tmp)
	if err == nil {
		err = tmp.Chmod(0o555)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		return "", fmt.Errorf("install the complete airlock in %s: %w", dir, err)
	}
	removeStale(dir, dst)
	return dst, nil
}

// ownedDir refuses a directory that someone else could put a program in:
// root runs what it finds there.
func ownedDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s must belong to uid %d and be writable by nobody else (chown and chmod go-w it): airlock runs the program it installs there", dir, os.Geteuid())
	}
	return nil
}

// stale is how long an installed complete airlock of another version is
// kept unused: a running daemon of that version still works after its
// file is removed, and a front of that version installs it again.
const stale = 7 * 24 * time.Hour

// touch marks an installed airlock used, at most once an hour.
func touch(p string, fi os.FileInfo) {
	if now := time.Now(); now.Sub(fi.ModTime()) > time.Hour {
		_ = os.Chtimes(p, now, now)
	}
}

// removeStale removes the other versions in dir unused for a week.
func removeStale(dir, keep string) {
	old, _ := filepath.Glob(filepath.Join(dir, "airlock-*"))
	for _, p := range old {
		if fi, err := os.Stat(p); p != keep && err == nil && time.Since(fi.ModTime()) > stale {
			_ = os.Remove(p)
		}
	}
}
