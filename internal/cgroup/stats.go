package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Stats are a group's counters, read from the kernel (not from anything the
// processes inside say).
type Stats struct {
	// MemoryPeak is the most memory the group used at once, in bytes.
	MemoryPeak int64
	// OOMKills counts processes the memory limit killed.
	OOMKills int64
	// CPUNanos is the user+system CPU time of all its processes.
	CPUNanos int64
	// PidsMax counts forks that failed on the pids limit.
	PidsMax int64
}

// Stats reads the group's counters. A counter the kernel does not offer
// reads as zero.
func (g *Group) Stats() (Stats, error) {
	var s Stats
	var errs []error
	read := func(ctrl, file string) []byte {
		b, err := os.ReadFile(filepath.Join(g.Path(ctrl), file))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		return b
	}
	if g.h.V2 {
		s.MemoryPeak = parseInt(read("memory", "memory.peak"))
		s.OOMKills = keyed(read("memory", "memory.events"), "oom_kill")
		s.CPUNanos = keyed(read("cpu", "cpu.stat"), "usage_usec") * 1000
	} else {
		s.MemoryPeak = parseInt(read("memory", "memory.max_usage_in_bytes"))
		s.OOMKills = keyed(read("memory", "memory.oom_control"), "oom_kill")
		s.CPUNanos = parseInt(read("cpuacct", "cpuacct.usage"))
	}
	s.PidsMax = keyed(read("pids", "pids.events"), "max")
	return s, errors.Join(errs...)
}

// PidsMax reads only the count of forks that failed on the pids limit: the
// one counter taken before and after every exec.
func (g *Group) PidsMax() int64 {
	b, _ := os.ReadFile(filepath.Join(g.Path("pids"), "pids.events"))
	return keyed(b, "max")
}

// CPUNanos reads only the CPU time, for frequent polling.
func (g *Group) CPUNanos() (int64, error) {
	if g.h.V2 {
		b, err := os.ReadFile(filepath.Join(g.Path("cpu"), "cpu.stat"))
		return keyed(b, "usage_usec") * 1000, err
	}
	b, err := os.ReadFile(filepath.Join(g.Path("cpuacct"), "cpuacct.usage"))
	return parseInt(b), err
}

func parseInt(b []byte) int64 {
	n, _ := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	return n
}

// keyed reads "key value" lines and returns the value of key.
func keyed(b []byte, key string) int64 {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// MemoryCurrent reads the memory the group and its descendants use now,
// page cache and tmpfs pages charged to them included.
func (g *Group) MemoryCurrent() (int64, error) {
	file := "memory.usage_in_bytes"
	if g.h.V2 {
		file = "memory.current"
	}
	b, err := os.ReadFile(filepath.Join(g.Path("memory"), file))
	if err != nil {
		return 0, err
	}
	return parseInt(b), nil
}
