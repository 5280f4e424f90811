package sandbox

import "slices"

// Evidence is what is known, besides the exit status, about how an exec
// ended.
type Evidence struct {
	// OOM: the memory limit killed a process of the exec.
	OOM bool
	// Pids: a fork failed on the process limit.
	Pids bool
	// DiskFull: a writable file system was full.
	DiskFull bool
}

// Classify fills r.Reason and r.LimitsHit from what is known about how the
// exec ended: who killed it (killedFor, empty if nobody did) and the
// evidence. ExitCode, Signal and the truncation flags must already be set.
// The host calls it again with its own counters; it never removes what the
// first call found.
func (r *Result) Classify(killedFor Reason, ev Evidence) {
	oom, pids, diskFull := ev.OOM, ev.Pids, ev.DiskFull
	hit := func(l Limit) {
		if !slices.Contains(r.LimitsHit, l) {
			r.LimitsHit = append(r.LimitsHit, l)
		}
	}
	if r.LimitsHit == nil {
		r.LimitsHit = []Limit{}
	}
	if oom {
		hit(LimitMemory)
	}
	if pids {
		hit(LimitPids)
	}
	if diskFull {
		hit(LimitDiskFull)
	}
	if r.StdoutTruncated || r.StderrTruncated {
		hit(LimitOutput)
	}
	switch killedFor {
	case ReasonTimeout:
		hit(LimitTimeout)
	case ReasonCPUTime:
		hit(LimitCPUTime)
	}
	failed := r.ExitCode != 0
	// What killed the command is the reason: the memory limit when nobody
	// else did; a timeout that killed it stays the reason even if a process
	// hit the memory limit on the way (limits_hit says so). Failing forks
	// explain a failure, or a fork bomb's timeout, better than the timeout.
	switch {
	case r.Reason == ReasonOOM || (oom && r.Signal == "SIGKILL" && (killedFor == "" || killedFor == ReasonOOM)):
		r.Reason = ReasonOOM
	case killedFor == ReasonOutputLimit:
		r.Reason = ReasonOutputLimit
	case pids && failed && killedFor != ReasonKilled:
		r.Reason = ReasonPids
	case killedFor != "":
		r.Reason = killedFor
	case r.Reason == "":
		r.Reason = ReasonExit
	}
}
