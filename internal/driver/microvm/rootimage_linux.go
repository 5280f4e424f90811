package microvm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/rootfs"
)

// rootImageVersion changes whenever what buildRootImage writes changes.
const rootImageVersion = 1

// The workload's uid and gid, as the agent runs commands; the default
// root's /etc/passwd names them.
const (
	workloadUID = 1000
	workloadGID = 1000
)

// identityFiles are the files of /etc the guest binds over the root's for
// each sandbox (its host name and machine id): every root image has them,
// so that there is something to bind over on a read-only disk.
var identityFiles = []string{"hostname", "hosts", "machine-id"}

// rootImage is a root file system as an ext4 disk image in the cache,
// shared read-only by every virtual machine that boots it.
type rootImage struct {
	Path string
	Key  string
}

// dpkgDir is the host's dpkg database.
const dpkgDir = "/var/lib/dpkg"

// buildRootImage returns the disk image of a root, building it into the
// cache unless it is there. With root empty it is the default root: the
// files below /usr of packages and of everything they depend on, as
// installed on the host, the host's /etc allowlist (rootfs.EtcAllowlist),
// and generated users and host files, keyed by the packages' versions.
// Otherwise it is a copy of the host directory root (which must hold
// /proc, /dev, /tmp and /workspace, as for every driver), keyed by what a
// walk of it finds (names, sizes, modes, times).
func buildRootImage(ctx context.Context, cache string, packages []string, root string) (*rootImage, error) {
	var key string
	var stage func(dir string) error
	if root == "" {
		st, err := os.Open(filepath.Join(dpkgDir, "status"))
		if err != nil {
			return nil, fmt.Errorf("read the host's package database: %w", err)
		}
		pkgs, err := parseDpkgStatus(st)
		st.Close()
		if err != nil {
			return nil, err
		}
		closure, err := packageClosure(pkgs, packages)
		if err != nil {
			return nil, fmt.Errorf("the microvm's default root: %w", err)
		}
		var ids []string
		for _, p := range closure {
			ids = append(ids, p.Name+"="+p.Version+":"+p.Arch)
		}
		etc, err := treeDigest("/etc", rootfs.EtcAllowlist, true)
		if err != nil {
			return nil, err
		}
		key = contentKey("root-packages", rootImageVersion, ids, etc, rootfs.EtcFiles(workloadUID, workloadGID, "sandbox"))
		stage = func(dir string) error { return stagePackages(dir, closure) }
	} else {
		fi, err := os.Lstat(root)
		if err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("root %s: give a host directory", root)
		}
		for _, d := range []string{"proc", "dev", "tmp", "workspace"} {
			if fi, err := os.Stat(filepath.Join(root, d)); err != nil || !fi.IsDir() {
				return nil, fmt.Errorf("the root file system %s has no /%s directory; create it (mkdir %s/%s)", root, d, root, d)
			}
		}
		digest, err := treeDigest(root, nil, false)
		if err != nil {
			return nil, err
		}
		key = contentKey("root-dir", rootImageVersion, filepath.Clean(root), digest)
		stage = func(dir string) error { return stageDir(dir, root) }
	}
	dir, err := cached(ctx, filepath.Join(cache, "root"), key, func(tmp string) error {
		st := filepath.Join(tmp, "stage")
		if err := os.Mkdir(st, 0o755); err != nil {
			return err
		}
		if err := stage(st); err != nil {
			return err
		}
		if err := addIdentityFiles(st); err != nil {
			return err
		}
		err := mkfsExt4(ctx, st, filepath.Join(tmp, "root.ext4"))
		if rerr := os.RemoveAll(st); err == nil {
			err = rerr
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("build the microvm's root image: %w", err)
	}
	return &rootImage{Path: filepath.Join(dir, "root.ext4"), Key: key}, nil
}

// stagePackages lays out the default root in dir: the packages' files
// below /usr (a merged-/usr layout: /bin, /lib... are links into it), the
// compiled Python modules beside their sources (a read-only root cannot
// cache them, and compiling on every start is slow under emulation), the
// /etc allowlist and generated users and host files.
func stagePackages(dir string, pkgs []*dpkgPackage) error {
	paths := map[string]bool{}
	for _, p := range pkgs {
		list, err := os.ReadFile(filepath.Join(dpkgDir, "info", p.Name+":"+p.Arch+".list"))
		if errors.Is(err, os.ErrNotExist) {
			list, err = os.ReadFile(filepath.Join(dpkgDir, "info", p.Name+".list"))
		}
		if err != nil {
			return fmt.Errorf("list the files of package %s: %w", p.Name, err)
		}
		for _, line := range strings.Split(string(list), "\n") {
			if p := usrPath(line); p != "" {
				paths[p] = true
				if strings.HasSuffix(p, ".py") {
					for _, pyc := range pycacheOf(p) {
						paths[pyc] = true
					}
				}
			}
		}
	}
	sorted := make([]string, 0, len(paths))
	for p := range paths {
		sorted = append(sorted, p)
	}
	sort.Strings(sorted)
	for _, p := range sorted {
		if err := copyEntry(p, filepath.Join(dir, p), false); err != nil {
			return err
		}
	}
	for _, d := range rootfs.RootDirs {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	for _, l := range rootfs.UsrLinks {
		if _, err := os.Lstat(filepath.Join(dir, "usr", l)); err == nil {
			if err := os.Symlink("usr/"+l, filepath.Join(dir, l)); err != nil {
				return err
			}
		}
	}
	if err := os.Chmod(filepath.Join(dir, "tmp"), 0o1777); err != nil {
		return err
	}
	if err := os.Chmod(filepath.Join(dir, "root"), 0o700); err != nil {
		return err
	}
	for _, name := range rootfs.EtcAllowlist {
		if err := copyTree(filepath.Join("/etc", name), filepath.Join(dir, "etc", name)); err != nil {
			return err
		}
	}
	for name, content := range rootfs.EtcFiles(workloadUID, workloadGID, "sandbox") {
		if err := os.WriteFile(filepath.Join(dir, "etc", name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// usrPath maps a path of a dpkg file list to where it is below /usr on a
// merged-/usr host ("/bin/sh" is "/usr/bin/sh"), or "" for a path outside
// /usr.
func usrPath(p string) string {
	p = filepath.Clean(strings.TrimSpace(p))
	if p == "/" || p == "." || !filepath.IsAbs(p) {
		return ""
	}
	first, rest, _ := strings.Cut(p[1:], "/")
	if first != "usr" {
		target, err := os.Readlink("/" + first)
		if err != nil || target != "usr/"+first {
			return ""
		}
		p = filepath.Join("/usr", first, rest)
	}
	return p
}

// pycacheOf lists the compiled forms of a Python source that exist on the
// host.
func pycacheOf(py string) []string {
	m, _ := filepath.Glob(filepath.Join(filepath.Dir(py), "__pycache__", strings.TrimSuffix(filepath.Base(py), ".py")+".cpython-*.pyc"))
	return m
}

// stageDir copies the host directory root into dir.
func stageDir(dir, root string) error {
	ents, err := os.ReadDir(root)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := copyTree(filepath.Join(root, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return copyMode(root, dir)
}

// addIdentityFiles makes sure the root has the files the guest binds over
// for each sandbox: an empty one where the root has none.
func addIdentityFiles(dir string) error {
	etc := filepath.Join(dir, "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return err
	}
	for _, name := range identityFiles {
		p := filepath.Join(etc, name)
		fi, err := os.Lstat(p)
		if err == nil && fi.Mode().IsRegular() {
			continue
		}
		if err == nil {
			// A link or anything else cannot be bound over: a file replaces it.
			if err := os.RemoveAll(p); err != nil {
				return err
			}
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// copyTree copies the host's src (a file, link or directory tree) to dst;
// a missing src is skipped.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, os.ErrNotExist) && p == src {
			return nil
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		return copyEntry(p, filepath.Join(dst, rel), true)
	})
}

// copyEntry copies one directory entry of the host to dst: a directory
// is made (with its parents), a link made the same, a regular file linked
// (or copied across file systems), with the host's owner and mode; device
// files, sockets and pipes are left out. A missing src is skipped unless
// must is set.
func copyEntry(src, dst string, must bool) error {
	fi, err := os.Lstat(src)
	if errors.Is(err, os.ErrNotExist) && !must {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", src, err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	switch {
	case fi.IsDir():
		if err := os.Mkdir(dst, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		return copyMode(src, dst)
	case fi.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if err := os.Symlink(target, dst); err != nil {
			return err
		}
	case fi.Mode().IsRegular():
		if err := os.Link(src, dst); err != nil {
			if err := copyFile(src, dst, fi.Mode()); err != nil {
				return err
			}
		}
	default:
		return nil
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return os.Lchown(dst, int(st.Uid), int(st.Gid))
	}
	return nil
}

// copyMode gives dst the mode and owner of src (a directory).
func copyMode(src, dst string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if err := os.Chmod(dst, fi.Mode().Perm()|fi.Mode()&(os.ModeSticky|os.ModeSetgid|os.ModeSetuid)); err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return os.Lchown(dst, int(st.Uid), int(st.Gid))
	}
	return nil
}

// copyFile copies the regular file src to dst with mode.
func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode.Perm())
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(dst, mode.Perm()|mode&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky))
	}
	return err
}

// treeDigest walks the host's dir (only the entries names, when given)
// and returns a digest of what it finds: each entry's path, type, mode,
// owner, size and modification time, a link's target, and with contents
// set a file's content.
func treeDigest(dir string, names []string, contents bool) (string, error) {
	// The walk stays inside dir whatever is swapped for a link meanwhile.
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", dir, err)
	}
	defer root.Close()
	h := sha256.New()
	entry := func(p string, fi fs.FileInfo) error {
		fmt.Fprintf(h, "%s\x00%o\x00", p, fi.Mode())
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			fmt.Fprintf(h, "%d:%d\x00", st.Uid, st.Gid)
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			t, _ := root.Readlink(p)
			fmt.Fprintf(h, "%s\x00", t)
		case fi.Mode().IsRegular() && contents:
			b, err := root.ReadFile(p)
			if err != nil {
				return err
			}
			h.Write(b)
		case fi.Mode().IsRegular():
			fmt.Fprintf(h, "%d\x00%d\x00", fi.Size(), fi.ModTime().UnixNano())
		}
		return nil
	}
	walk := func(top string) error {
		// The top itself without following it (a link, as /etc/localtime
		// is, leads outside), then what a directory holds.
		fi, err := root.Lstat(top)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return entry(top, fi)
		}
		return fs.WalkDir(root.FS(), top, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			return entry(p, fi)
		})
	}
	if names == nil {
		names = []string{"."}
	}
	for _, n := range names {
		if err := walk(n); err != nil {
			return "", fmt.Errorf("read %s: %w", filepath.Join(dir, n), err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// mkfsExt4 makes an ext4 image of the tree dir at image, sized to fit it:
// no journal (it is mounted read-only), no reserved blocks, root-owned
// root directory, the tree's owners and modes.
func mkfsExt4(ctx context.Context, dir, image string) error {
	var blocks, inodes int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		inodes++
		fi, err := d.Info()
		if err != nil {
			return err
		}
		blocks += (fi.Size() + 4095) / 4096
		if d.IsDir() {
			blocks++
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Metadata (inode tables, bitmaps, directories' indexes) takes room
	// beyond the data: a margin that grows with the tree.
	size := (blocks + blocks/8 + inodes/16 + 8192) * 4096
	nodes := inodes + inodes/8 + 1024
	for attempt := 0; ; attempt++ {
		f, err := os.OpenFile(image, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		err = f.Truncate(size)
		f.Close()
		if err != nil {
			return err
		}
		_, err = tool(ctx, "/", "mkfs.ext4", "-q", "-F", "-b", "4096", "-m", "0", "-N", strconv.FormatInt(nodes, 10),
			"-O", "^has_journal", "-L", "airlock-root", "-E", "root_owner=0:0", "-d", dir, image)
		if err == nil {
			return os.Chmod(image, 0o644)
		}
		if attempt == 2 {
			return fmt.Errorf("make the root image: %w (install e2fsprogs if mkfs.ext4 is missing)", err)
		}
		size += size / 2
	}
}

// rootFingerprint says cheaply whether what a root image is made of may
// have changed: for the default root, the package database's file and the
// /etc allowlist as stat sees them; for a root directory, the same walk
// as its key (names, sizes, modes, times). Equal fingerprints make equal
// images.
func rootFingerprint(root string) (string, error) {
	if root != "" {
		return treeDigest(root, nil, false)
	}
	fi, err := os.Stat(filepath.Join(dpkgDir, "status"))
	if err != nil {
		return "", fmt.Errorf("read the host's package database: %w", err)
	}
	etc, err := treeDigest("/etc", rootfs.EtcAllowlist, false)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d:%d:%s", fi.Size(), fi.ModTime().UnixNano(), etc), nil
}
