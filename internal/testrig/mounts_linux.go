package testrig

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// MountsUnder lists the mount points at or below dir in this process's
// mount namespace, deepest first (the order to unmount them in).
func MountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	dir = filepath.Clean(dir)
	var points []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeOctal(fields[4])
		if dir == "/" || p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	// Deeper first; among equal paths (stacked mounts) the later one first.
	slices.Reverse(points)
	slices.SortStableFunc(points, func(a, b string) int { return depth(b) - depth(a) })
	return points, nil
}

// depth is how many names a clean absolute path has: 0 for /.
func depth(p string) int {
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}

// UnmountUnder detaches every mount at or below dir, deepest first, and
// says which could not be detached.
func UnmountUnder(dir string) error {
	var errs []error
	// A detached mount can uncover another at the same point: go round
	// until nothing is left or nothing changes.
	for range 8 {
		points, err := MountsUnder(dir)
		if err != nil {
			return err
		}
		if len(points) == 0 {
			return nil
		}
		errs = errs[:0]
		for _, p := range points {
			if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
			}
		}
	}
	points, _ := MountsUnder(dir)
	if len(points) > 0 {
		errs = append(errs, fmt.Errorf("still mounted under %s: %s", dir, strings.Join(points, ", ")))
	}
	return errors.Join(errs...)
}

// unescapeOctal undoes the kernel's \NNN escaping of spaces, tabs, newlines
// and backslashes in mountinfo paths.
func unescapeOctal(s string) string {
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
