package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// MemInfo is what /proc/meminfo says about the host's memory, in bytes.
type MemInfo struct {
	Total     uint64
	Available uint64
	// Unreclaim is the kernel's unreclaimable slab (SUnreclaim); 0 when
	// the kernel does not say.
	Unreclaim uint64
}

// ParseMemInfo reads MemTotal and MemAvailable from /proc/meminfo content.
func ParseMemInfo(r io.Reader) (MemInfo, error) {
	var m MemInfo
	var haveTotal, haveAvail bool
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *uint64
		switch key {
		case "MemTotal":
			dst, haveTotal = &m.Total, true
		case "MemAvailable":
			dst, haveAvail = &m.Available, true
		case "SUnreclaim":
			dst = &m.Unreclaim
		default:
			continue
		}
		v, err := parseKB(rest)
		if err != nil {
			return MemInfo{}, fmt.Errorf("parse meminfo %s: %w", key, err)
		}
		*dst = v
	}
	if err := sc.Err(); err != nil {
		return MemInfo{}, fmt.Errorf("read meminfo: %w", err)
	}
	if !haveTotal || !haveAvail {
		return MemInfo{}, errors.New("parse meminfo: no MemTotal or MemAvailable line (kernel before 3.14?)")
	}
	return m, nil
}

// ParsePss returns the Pss line of /proc/PID/smaps_rollup content, in bytes.
func ParsePss(r io.Reader) (uint64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if ok && key == "Pss" {
			v, err := parseKB(rest)
			if err != nil {
				return 0, fmt.Errorf("parse smaps_rollup Pss: %w", err)
			}
			return v, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read smaps_rollup: %w", err)
	}
	return 0, errors.New("parse smaps_rollup: no Pss line")
}

// parseKB reads "   1234 kB" as bytes.
func parseKB(s string) (uint64, error) {
	f := strings.Fields(s)
	if len(f) == 0 || len(f) > 2 || (len(f) == 2 && f[1] != "kB") {
		return 0, fmt.Errorf("want a number of kB, got %q", strings.TrimSpace(s))
	}
	v, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("want a number of kB, got %q", strings.TrimSpace(s))
	}
	if len(f) == 2 {
		v *= 1024
	}
	return v, nil
}

// readMemInfo reads the host's /proc/meminfo.
func readMemInfo() (MemInfo, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return MemInfo{}, fmt.Errorf("read host memory: %w", err)
	}
	defer f.Close()
	return ParseMemInfo(f)
}

// pssOf sums the PSS of the processes pids, each counted once. A process
// that has exited meanwhile counts as zero.
func pssOf(procRoot string, pids []int) (uint64, error) {
	seen := map[int]bool{}
	var sum uint64
	for _, pid := range pids {
		if seen[pid] {
			continue
		}
		seen[pid] = true
		b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "smaps_rollup"))
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) || (err == nil && len(b) == 0) {
			continue // gone, or a zombie without memory
		}
		if err != nil {
			return 0, fmt.Errorf("read memory of process %d: %w", pid, err)
		}
		v, err := ParsePss(bytes.NewReader(b))
		if err != nil {
			return 0, fmt.Errorf("process %d: %w", pid, err)
		}
		sum += v
	}
	return sum, nil
}

// cgroupMemory reads the memory a memory cgroup charges (user and kernel,
// its descendants included): memory.current on v2, memory.usage_in_bytes
// on v1.
func cgroupMemory(dir string, v2 bool) (uint64, error) {
	name := "memory.usage_in_bytes"
	if v2 {
		name = "memory.current"
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return 0, fmt.Errorf("read cgroup memory: %w", err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", filepath.Join(dir, name), err)
	}
	return v, nil
}

// mib converts bytes to MiB.
func mib(b float64) float64 { return b / (1 << 20) }
