// Package tartree writes a directory tree as a tar archive: the one walk
// behind `airlock image save` (an unpacked root) and `airlock sandbox cp`'s
// upload of a directory.
package tartree

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Write writes the tree at root to w as an uncompressed tar: regular
// files (a hard link for a second name of one), directories and symlinks,
// with their modes and times, and numeric owners only (no user or group
// names of this host). Symlinks are stored, never followed, and a file
// that changes size while it is read fails the archive.
func Write(root string, w io.Writer) error {
	tw := tar.NewWriter(w)
	type inode struct{ dev, ino uint64 }
	seen := map[inode]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		var link string
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		st, _ := fi.Sys().(*syscall.Stat_t)
		if st != nil && fi.Mode().IsRegular() && st.Nlink > 1 {
			key := inode{uint64(st.Dev), st.Ino} //nolint:gosec,unconvert // Dev is int32 on darwin
			if first, ok := seen[key]; ok {
				hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				return tw.WriteHeader(hdr)
			}
			seen[key] = hdr.Name
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0) //nolint:gosec // G122: the final name is not followed; the callers' trees are theirs to send
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := io.Copy(tw, f)
		if err == nil && n != hdr.Size {
			err = errors.New("changed while it was archived")
		}
		if err != nil {
			return fmt.Errorf("%s: %w", hdr.Name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
