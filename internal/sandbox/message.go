package sandbox

import (
	"fmt"
	"time"
)

// Message is the one line a model reads to know what happened to a command
// and what to do about it, for a result r under limits l, with the
// command's own timeout and CPU-time limit. Drivers fill Result.Message
// with it.
func Message(r *Result, l Limits, timeout, cpuTime time.Duration) string {
	var m string
	switch r.Reason {
	case ReasonOOM:
		m = fmt.Sprintf("memory limit of %s exceeded; the process was killed — use less memory (e.g. process the data in chunks) or raise --memory", FormatBytes(l.MemoryBytes))
	case ReasonTimeout:
		m = fmt.Sprintf("timed out after %s; the command and every process it started were killed — make it faster, start it in the background, or raise --timeout", timeout)
	case ReasonCPUTime:
		m = fmt.Sprintf("CPU time limit of %s exceeded; the command was killed — make it do less work or raise --cpu-time", cpuTime)
	case ReasonOutputLimit:
		m = fmt.Sprintf("output passed the limit of %s per stream; the command was killed and its output cut — write large output to a file under /workspace and read it in parts", FormatBytes(l.OutputBytes))
	case ReasonPids:
		m = fmt.Sprintf("process limit of %d reached: a fork or new thread failed — start fewer processes or threads, or raise --pids", l.Pids)
	case ReasonKilled:
		m = "the command was killed on request"
	case ReasonExit:
		if r.Signal != "" {
			m = "the command was ended by " + r.Signal
		}
	}
	var notes []string
	if r.Reason != ReasonOOM && r.Hit(LimitMemory) {
		notes = append(notes, fmt.Sprintf("a process was killed by the memory limit of %s", FormatBytes(l.MemoryBytes)))
	}
	if r.Reason != ReasonPids && r.Hit(LimitPids) {
		notes = append(notes, fmt.Sprintf("the process limit of %d was reached", l.Pids))
	}
	if r.Hit(LimitDiskFull) {
		notes = append(notes, fmt.Sprintf("a writable file system is full (/workspace holds %s, /tmp %s) — delete files or raise --disk", FormatBytes(l.DiskBytes), FormatBytes(l.TmpBytes)))
	}
	for _, n := range notes {
		if m == "" {
			m = n
		} else {
			m += "; " + n
		}
	}
	return m
}

// FormatBytes formats n as a size a person reads: 512 MiB, 1.5 GiB, 100 KiB.
func FormatBytes(n int64) string {
	const k = 1024
	switch {
	case n >= k*k*k && n%(k*k*k) == 0:
		return fmt.Sprintf("%d GiB", n/(k*k*k))
	case n >= k*k*k:
		return fmt.Sprintf("%.1f GiB", float64(n)/(k*k*k))
	case n >= k*k && n%(k*k) == 0:
		return fmt.Sprintf("%d MiB", n/(k*k))
	case n >= k*k:
		return fmt.Sprintf("%.1f MiB", float64(n)/(k*k))
	case n >= k:
		return fmt.Sprintf("%d KiB", n/k)
	}
	return fmt.Sprintf("%d bytes", n)
}
