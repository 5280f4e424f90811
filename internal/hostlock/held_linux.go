package hostlock

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// heldLocks returns the names (without ".lock") of the lock files in dir
// that some process holds a flock on, as /proc/locks lists them now: one
// read of that file and one walk of dir's entries, whose inode numbers
// name them. Nil when either cannot be read (every id is then checked
// apart). A lock taken after the read is not in it, nor one dropped after
// it left out: the caller only passes over what it returns, and checks
// the rest.
func heldLocks(dir string) map[string]bool {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return nil
	}
	inodes := flockInodes(fmt.Sprintf("%02x:%02x:", unix.Major(st.Dev), unix.Minor(st.Dev)))
	if len(inodes) == 0 {
		return nil
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	held := map[string]bool{}
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return nil
		}
		if n <= 0 {
			return held
		}
		for b := buf[:n]; len(b) >= 19; {
			// struct linux_dirent64: ino, off, reclen, type, name.
			ino := binary.NativeEndian.Uint64(b)
			reclen := int(binary.NativeEndian.Uint16(b[16:]))
			if reclen < 19 || reclen > len(b) {
				return nil
			}
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if id, ok := strings.CutSuffix(string(name), ".lock"); ok && inodes[ino] {
				held[id] = true
			}
			b = b[reclen:]
		}
	}
}

// flockInodes reads /proc/locks for the inodes of the file system dev
// ("MAJ:MIN:", as that file writes them) that hold a flock.
func flockInodes(dev string) map[uint64]bool {
	f, err := os.Open("/proc/locks")
	if err != nil {
		return nil
	}
	defer f.Close()
	inodes := map[uint64]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "1: FLOCK  ADVISORY  WRITE 1234 00:19:5678 0 EOF"; a waiter's
		// line has "->" after the number: it holds nothing.
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] != "FLOCK" {
			continue
		}
		if rest, ok := strings.CutPrefix(fields[5], dev); ok {
			if ino, err := strconv.ParseUint(rest, 10, 64); err == nil {
				inodes[ino] = true
			}
		}
	}
	return inodes
}
