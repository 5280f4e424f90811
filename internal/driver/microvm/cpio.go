package microvm

import (
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
)

// cpioWriter writes a cpio archive in the "newc" format, the one the
// Linux kernel unpacks as an initramfs. Entries are owned by root; the
// archive is the same bytes for the same entries.
type cpioWriter struct {
	w   io.Writer
	ino int
	err error
}

// cpio mode bits (the kernel's S_IF*).
const (
	cpioDir  = 0o040000
	cpioFile = 0o100000
	cpioChar = 0o020000
)

func newCPIO(w io.Writer) *cpioWriter { return &cpioWriter{w: w} }

// Dir adds a directory.
func (c *cpioWriter) Dir(name string, perm fs.FileMode) {
	c.entry(name, cpioDir|uint32(perm.Perm()), 0, 0, nil)
}

// File adds a regular file with data.
func (c *cpioWriter) File(name string, perm fs.FileMode, data []byte) {
	c.entry(name, cpioFile|uint32(perm.Perm()), 0, 0, data)
}

// CharDev adds a character device node.
func (c *cpioWriter) CharDev(name string, perm fs.FileMode, major, minor uint32) {
	c.entry(name, cpioChar|uint32(perm.Perm()), major, minor, nil)
}

// Close writes the trailer. It returns the first error of any write.
func (c *cpioWriter) Close() error {
	c.ino = -1
	c.entry("TRAILER!!!", 0, 0, 0, nil)
	return c.err
}

func (c *cpioWriter) entry(name string, mode, rmajor, rminor uint32, data []byte) {
	if c.err != nil {
		return
	}
	if name != "TRAILER!!!" {
		clean := path.Clean(strings.TrimPrefix(name, "/"))
		if clean == "." || strings.HasPrefix(clean, "../") || clean == ".." {
			c.err = fmt.Errorf("cpio: bad entry name %q", name)
			return
		}
		name = clean
	}
	c.ino++
	ino := c.ino
	if ino < 0 {
		ino = 0
	}
	nlink := 1
	if mode&0o170000 == cpioDir {
		nlink = 2
	}
	// magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor,
	// devminor, rdevmajor, rdevminor, namesize, check: eight hex digits each.
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rmajor, rminor, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write([]byte(name + "\x00"))
	c.pad(len(hdr) + len(name) + 1)
	c.write(data)
	c.pad(len(data))
}

func (c *cpioWriter) write(b []byte) {
	if c.err == nil && len(b) > 0 {
		_, c.err = c.w.Write(b)
	}
}

// pad aligns the stream to 4 bytes after n bytes.
func (c *cpioWriter) pad(n int) {
	if r := n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}
