package gvisor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/mountinfo"
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
// mount table, passing over lines that are not well-formed.
func cgroupPoints(r io.Reader) []string {
	mounts, _ := mountinfo.Parse(r)
	var out []string
	for _, m := range mounts {
		if m.FSType == "cgroup" || m.FSType == "cgroup2" {
			out = append(out, m.Point)
		}
	}
	return out
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
