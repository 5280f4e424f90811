// Package rootimage builds the root file system the container-based test
// rigs run: Debian's minbase (debootstrap --variant=minbase) plus procps and python3,
// as an uncompressed tarball of the tree, cached by the Debian release it
// was built from.
//
// The tarball is what `docker import` takes; the kube rig wraps it as a
// one-layer OCI image for `ctr images import`. Build or find it with
//
//	go run ./internal/testrig/cmd/testrig rootimage   # prints the tarball's path
//
// or from Go with Ensure (builds when missing; needs root, debootstrap and
// the Debian mirror) and Find (never builds, never uses the network).
//
// The cache key: debootstrap installs every package from one suite, so the
// suite's signed release file (dists/<suite>/InRelease) fixes the version
// of every package in the image. The image is cached under the hash of that
// file, and its manifest lists the packages and versions it holds. Ensure
// fetches the release file (a few kB) and rebuilds only when it changed;
// when the mirror cannot be reached it uses the newest image built before.
package rootimage

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testrig"
)

// Spec says which image to build. The zero Spec is Debian 12 (bookworm)
// minbase plus procps and python3 from deb.debian.org.
type Spec struct {
	// Suite is the Debian suite; "" means "bookworm".
	Suite string
	// Mirror is the Debian mirror; "" means "http://deb.debian.org/debian".
	Mirror string
	// Include lists the packages added to minbase; nil means DefaultInclude.
	Include []string
}

// Defaults of Spec.
const (
	DefaultSuite  = "bookworm"
	DefaultMirror = "http://deb.debian.org/debian"
)

// DefaultInclude are the packages added to minbase when Spec.Include is nil:
// python3, and procps for the conformance suite's ps. The Docker tests and
// the kube rig share this one image.
var DefaultInclude = []string{"procps", "python3"}

func (s Spec) withDefaults() Spec {
	if s.Suite == "" {
		s.Suite = DefaultSuite
	}
	if s.Mirror == "" {
		s.Mirror = DefaultMirror
	}
	if s.Include == nil {
		s.Include = DefaultInclude
	}
	s.Include = slices.Sorted(slices.Values(s.Include))
	s.Include = slices.Compact(s.Include)
	return s
}

// dir is the directory of every image built for this spec, one per release:
// "bookworm-minbase-python3".
func (s Spec) dir(cacheDir string) string {
	name := s.Suite + "-minbase"
	if len(s.Include) > 0 {
		name += "-" + strings.Join(s.Include, "+")
	}
	if len(name) > 80 {
		sum := sha256.Sum256([]byte(strings.Join(s.Include, ",")))
		name = s.Suite + "-minbase-" + hex.EncodeToString(sum[:6])
	}
	return filepath.Join(cacheDir, "rootimage", name)
}

// Image is a built root file system.
type Image struct {
	// Path is the tarball of the tree (uncompressed tar, numeric owners).
	Path string
	// Manifest says what it was built from and what it holds.
	Manifest Manifest
}

// Manifest describes a built image; it is stored next to the tarball.
type Manifest struct {
	Suite   string   `json:"suite"`
	Mirror  string   `json:"mirror"`
	Include []string `json:"include"`
	// Release is the sha256 of the suite's InRelease file the image was
	// built from; its first 16 hex digits name the image's directory.
	Release string `json:"release"`
	// ReleaseDate is the Date field of that release file.
	ReleaseDate string `json:"release_date"`
	// Packages maps every installed package to its version.
	Packages map[string]string `json:"packages"`
	// Size is the tarball's size in bytes, and SHA256 its digest (hex):
	// as an image layer, the tarball's digest and diff ID.
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Built is when the image was built, and BuildSeconds how long it took.
	Built        time.Time `json:"built"`
	BuildSeconds float64   `json:"build_seconds"`
}

// File names in an image's directory.
const (
	tarballName  = "rootfs.tar"
	manifestName = "manifest.json"
)

// ErrNotBuilt says no image is cached for the spec.
var ErrNotBuilt = errors.New("the root image is not built")

// Find returns the newest image cached for spec, without building and
// without the network.
func Find(cacheDir string, spec Spec) (*Image, error) {
	spec = spec.withDefaults()
	dir := spec.dir(cacheDir)
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read the root image cache: %w", err)
	}
	var best *Image
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), "build-") {
			continue
		}
		img, err := load(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if best == nil || img.Manifest.Built.After(best.Manifest.Built) {
			best = img
		}
	}
	if best == nil {
		return nil, fmt.Errorf("%w in %s: build it with `make kube-rig` or `go run ./internal/testrig/cmd/testrig rootimage` (as root, needs debootstrap)", ErrNotBuilt, dir)
	}
	return best, nil
}

// load reads the image in dir, checking that its tarball is whole.
func load(dir string) (*Image, error) {
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("parse %s: %w", filepath.Join(dir, manifestName), err)
	}
	path := filepath.Join(dir, tarballName)
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() != m.Size || m.SHA256 == "" {
		return nil, fmt.Errorf("%s is %d bytes, its manifest says %d", path, st.Size(), m.Size)
	}
	return &Image{Path: path, Manifest: m}, nil
}

// releaseTimeout bounds fetching the suite's release file.
const releaseTimeout = 30 * time.Second

// Ensure returns the image for spec built from the mirror's current
// release, building it when it is not cached (about a minute; root,
// debootstrap and the mirror are needed). Progress goes to log. When the
// mirror cannot be reached, the newest cached image is used instead.
func Ensure(ctx context.Context, cacheDir string, spec Spec, log io.Writer) (*Image, error) {
	spec = spec.withDefaults()
	if log == nil {
		log = io.Discard
	}
	dir := spec.dir(cacheDir)
	lock, err := testrig.Acquire(ctx, filepath.Join(dir, "lock"), "the root image build")
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()
	cleanStaleBuilds(dir, log)

	release, err := fetchRelease(ctx, spec)
	if err != nil {
		img, ferr := Find(cacheDir, spec)
		if ferr != nil {
			return nil, fmt.Errorf("fetch the %s release file (to know which packages the image gets): %w; and no image is cached", spec.Suite, err)
		}
		fmt.Fprintf(log, "rootimage: %v; using the image cached from release %s\n", err, img.Manifest.ReleaseDate)
		return img, nil
	}
	sum := sha256.Sum256(release)
	key := hex.EncodeToString(sum[:])
	final := filepath.Join(dir, key[:16])
	if img, err := load(final); err == nil {
		return img, nil
	}
	return build(ctx, spec, dir, final, key, releaseDate(release), log)
}

// fetchRelease downloads the suite's InRelease file.
func fetchRelease(ctx context.Context, spec Spec) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
	url := strings.TrimSuffix(spec.Mirror, "/") + "/dists/" + spec.Suite + "/InRelease"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", url, err)
	}
	if !strings.Contains(string(b), "\nDate: ") && !strings.HasPrefix(string(b), "Date: ") {
		return nil, fmt.Errorf("fetch %s: not a Debian release file (no Date field)", url)
	}
	return b, nil
}

// releaseDate returns the Date field of a release file.
func releaseDate(release []byte) string {
	sc := bufio.NewScanner(strings.NewReader(string(release)))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "Date: "); ok {
			return strings.TrimSpace(d)
		}
	}
	return ""
}

// cleanStaleBuilds removes what an interrupted build left in dir. The
// caller holds the lock, so no build is running.
func cleanStaleBuilds(dir string, log io.Writer) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "build-") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if err := testrig.UnmountUnder(p); err != nil {
			fmt.Fprintf(log, "rootimage: clean up an interrupted build: %v\n", err)
			continue
		}
		_ = os.RemoveAll(p)
	}
}

// prune lists what the image does not need: package caches and lists,
// documentation, and device nodes (the container runtime makes /dev).
var prune = []string{
	"var/cache/apt/archives", "var/cache/apt/pkgcache.bin", "var/cache/apt/srcpkgcache.bin",
	"var/lib/apt/lists", "var/log", "usr/share/doc", "usr/share/man", "usr/share/info",
	"usr/share/locale", "dev", "debootstrap",
}

// build runs debootstrap into a directory under dir, prunes it, tars it and
// moves the result to final.
func build(ctx context.Context, spec Spec, dir, final, key, date string, log io.Writer) (_ *Image, err error) {
	start := time.Now()
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("build the root image: debootstrap needs root (running as uid %d)", os.Geteuid())
	}
	debootstrap, err := exec.LookPath("debootstrap")
	if err != nil {
		return nil, fmt.Errorf("build the root image: debootstrap is not installed: apt-get install debootstrap")
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return nil, fmt.Errorf("build the root image: %w", err)
	}
	defer func() {
		if uerr := testrig.UnmountUnder(tmp); uerr != nil {
			err = errors.Join(err, uerr)
			return
		}
		_ = os.RemoveAll(tmp)
	}()
	root := filepath.Join(tmp, "rootfs")
	fmt.Fprintf(log, "rootimage: debootstrap --variant=minbase --include=%s %s (release of %s) into %s\n",
		strings.Join(spec.Include, ","), spec.Suite, date, root)
	args := []string{"--variant=minbase", "--components=main"}
	if len(spec.Include) > 0 {
		args = append(args, "--include="+strings.Join(spec.Include, ","))
	}
	args = append(args, spec.Suite, root, spec.Mirror)
	logPath := filepath.Join(tmp, "debootstrap.log")
	if err := run(ctx, logPath, debootstrap, args...); err != nil {
		inner := testrig.Tail(filepath.Join(root, "debootstrap", "debootstrap.log"), 10)
		return nil, fmt.Errorf("debootstrap %s: %w\n%s\n%s", spec.Suite, err, testrig.Tail(logPath, 15), inner)
	}
	pkgs, err := installedPackages(filepath.Join(root, "var/lib/dpkg/status"))
	if err != nil {
		return nil, fmt.Errorf("build the root image: %w", err)
	}
	for _, p := range spec.Include {
		if _, ok := pkgs[p]; !ok {
			return nil, fmt.Errorf("build the root image: debootstrap did not install %s", p)
		}
	}
	// debootstrap unmounts what it mounted; make sure before pruning.
	if err := testrig.UnmountUnder(root); err != nil {
		return nil, fmt.Errorf("build the root image: %w", err)
	}
	for _, p := range prune {
		if err := os.RemoveAll(filepath.Join(root, p)); err != nil {
			return nil, fmt.Errorf("build the root image: prune %s: %w", p, err)
		}
	}
	for _, d := range []string{"dev", "var/log", "var/lib/apt/lists/partial", "var/cache/apt/archives/partial"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return nil, fmt.Errorf("build the root image: %w", err)
		}
	}
	out := filepath.Join(tmp, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		return nil, fmt.Errorf("build the root image: %w", err)
	}
	tarball := filepath.Join(out, tarballName)
	if err := run(ctx, logPath, "tar", "--numeric-owner", "--xattrs", "--sort=name", "-C", root, "-cf", tarball, "."); err != nil {
		return nil, fmt.Errorf("tar the root image: %w: %s", err, testrig.Tail(logPath, 5))
	}
	st, err := os.Stat(tarball)
	if err != nil {
		return nil, fmt.Errorf("build the root image: %w", err)
	}
	digest, err := fileSHA256(tarball)
	if err != nil {
		return nil, fmt.Errorf("build the root image: %w", err)
	}
	m := Manifest{
		Suite: spec.Suite, Mirror: spec.Mirror, Include: spec.Include,
		Release: key, ReleaseDate: date, Packages: pkgs, Size: st.Size(), SHA256: digest,
		Built: time.Now().UTC(), BuildSeconds: time.Since(start).Seconds(),
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("build the root image: %w", err)
	}
	if err := os.WriteFile(filepath.Join(out, manifestName), append(b, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("build the root image: %w", err)
	}
	_ = os.RemoveAll(final)
	if err := os.Rename(out, final); err != nil {
		return nil, fmt.Errorf("build the root image: %w", err)
	}
	fmt.Fprintf(log, "rootimage: built %s (%d packages, %d MB) in %.0fs\n",
		filepath.Join(final, tarballName), len(pkgs), st.Size()>>20, m.BuildSeconds)
	return load(final)
}

// fileSHA256 is the hex sha256 of a file's content.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// run runs a command, appending its output to logPath.
func run(ctx context.Context, logPath, name string, args ...string) error {
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.WaitDelay = 10 * time.Second
	return cmd.Run()
}

// installedPackages reads a dpkg status file: every package whose status is
// "install ok installed", with its version.
func installedPackages(statusPath string) (map[string]string, error) {
	f, err := os.Open(statusPath)
	if err != nil {
		return nil, fmt.Errorf("read the image's package list: %w", err)
	}
	defer f.Close()
	return parseStatus(f)
}

// parseStatus parses the format of /var/lib/dpkg/status.
func parseStatus(r io.Reader) (map[string]string, error) {
	pkgs := map[string]string{}
	var name, version, status string
	flush := func() {
		if name != "" && status == "install ok installed" {
			pkgs[name] = version
		}
		name, version, status = "", "", ""
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			flush()
		case strings.HasPrefix(line, "Package: "):
			name = strings.TrimSpace(strings.TrimPrefix(line, "Package: "))
		case strings.HasPrefix(line, "Version: "):
			version = strings.TrimSpace(strings.TrimPrefix(line, "Version: "))
		case strings.HasPrefix(line, "Status: "):
			status = strings.TrimSpace(strings.TrimPrefix(line, "Status: "))
		}
	}
	flush()
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("parse dpkg status: %w", err)
	}
	if len(pkgs) == 0 {
		return nil, errors.New("parse dpkg status: no installed package")
	}
	return pkgs, nil
}
