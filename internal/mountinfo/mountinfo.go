// Package mountinfo reads a mount table in the format of
// /proc/<pid>/mountinfo (see proc(5)): the host's own, to find its cgroup
// file systems and what a sandbox left mounted, and a sandbox's, as a
// command inside prints it.
package mountinfo

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Mount is one line of a mount table:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
type Mount struct {
	// Root is the root of the mount within its file system ("/mnt1").
	Root string
	// Point is the mount point ("/mnt2").
	Point string
	// Options are the per-mount options ("rw", "noatime"): ro, nosuid,
	// nodev and noexec show here.
	Options []string
	// FSType is the file system's type ("ext3", "cgroup2").
	FSType string
	// Source is the mounted source ("/dev/root"), or what the file system
	// names instead.
	Source string
	// SuperOptions are the per-superblock options; cgroup v1 lists its
	// controllers here.
	SuperOptions []string
}

// SyntaxError says a line of the table does not have the form of one.
type SyntaxError struct {
	Line int    // the line's number, from 1
	Text string // the line
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("parse mountinfo line %d: malformed: %q", e.Line, e.Text)
}

// Parse reads a mount table. It returns the mounts of every well-formed
// line, and, when a line is malformed, a *SyntaxError naming the first such
// line; blank lines are skipped. A caller that checks the table fails on any
// error; one that takes the kernel's word may pass over a *SyntaxError and
// use the mounts.
func Parse(r io.Reader) ([]Mount, error) {
	var mounts []Mount
	var bad *SyntaxError
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		// Six fixed fields, then optional fields, "-", type, source, options.
		if sep < 6 || len(f) < sep+4 {
			if bad == nil {
				bad = &SyntaxError{Line: n, Text: line}
			}
			continue
		}
		mounts = append(mounts, Mount{
			Root:         Unescape(f[3]),
			Point:        Unescape(f[4]),
			Options:      strings.Split(f[5], ","),
			FSType:       f[sep+1],
			Source:       Unescape(f[sep+2]),
			SuperOptions: strings.Split(f[sep+3], ","),
		})
	}
	if err := sc.Err(); err != nil {
		return mounts, fmt.Errorf("read mountinfo: %w", err)
	}
	if bad != nil {
		return mounts, bad
	}
	return mounts, nil
}

// Read reads this process's mount table, /proc/self/mountinfo.
func Read() ([]Mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("open the mount table: %w", err)
	}
	defer f.Close()
	return Parse(f)
}

// Unescape undoes the kernel's \NNN (octal) escapes of spaces, tabs,
// newlines and backslashes in the table's paths ("/my\040disk"). What is
// not a valid escape stays as it is.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
