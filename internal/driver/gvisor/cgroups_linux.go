package gvisor

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// cgroupDirs lists the directories of the sandbox id's cgroup that exist in
// any cgroup hierarchy of the host: those airlock made and those runsc
// made for the other controllers.
func cgroupDirs(parent, id string) []string {
	var out []string
	for _, mnt := range cgroupMounts() {
		dir := filepath.Join(mnt, parent, id)
		if _, err := os.Stat(dir); err == nil {
			out = append(out, dir)
		}
	}
	return out
}

// cgroupMounts lists the mount points of the host's cgroup file systems.
func cgroupMounts() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	return cgroupPoints(f)
}

// cgroupPoints lists the mount points of the cgroup file systems in a
// mount table.
func cgroupPoints(r io.Reader) []string {
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		fields, fs := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 5 || len(fs) < 1 || (fs[0] != "cgroup" && fs[0] != "cgroup2") {
			continue
		}
		out = append(out, unescapeMount(fields[4]))
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeCgroupTree removes an empty cgroup directory and its children,
// deepest first, retrying while the kernel still counts a process that
// has just died.
func removeCgroupTree(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := removeCgroupTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	for i := range 50 {
		err = unix.Rmdir(dir)
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(time.Duration(i+1) * time.Millisecond)
	}
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	return nil
}
