package agent

import (
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Classify fills r.Reason and r.LimitsHit from what is known about how an
// exec ended: who killed it (killedFor, empty if nobody did), whether the
// memory limit killed a process, whether a fork failed on the pids limit,
// whether a writable file system was full. ExitCode, Signal and the
// truncation flags must already be set. The host calls it again with its
// own counters; it never removes what the first call found.
func Classify(r *sandbox.Result, killedFor sandbox.Reason, oom, pids, diskFull bool) {
	hit := func(l sandbox.Limit) {
		if !slices.Contains(r.LimitsHit, l) {
			r.LimitsHit = append(r.LimitsHit, l)
		}
	}
	if r.LimitsHit == nil {
		r.LimitsHit = []sandbox.Limit{}
	}
	if oom {
		hit(sandbox.LimitMemory)
	}
	if pids {
		hit(sandbox.LimitPids)
	}
	if diskFull {
		hit(sandbox.LimitDiskFull)
	}
	if r.StdoutTruncated || r.StderrTruncated {
		hit(sandbox.LimitOutput)
	}
	switch killedFor {
	case sandbox.ReasonTimeout:
		hit(sandbox.LimitTimeout)
	case sandbox.ReasonCPUTime:
		hit(sandbox.LimitCPUTime)
	}
	failed := r.ExitCode != 0
	// What killed the command is the reason: the memory limit when nobody
	// else did; a timeout that killed it stays the reason even if a process
	// hit the memory limit on the way (limits_hit says so). Failing forks
	// explain a failure, or a fork bomb's timeout, better than the timeout.
	switch {
	case r.Reason == sandbox.ReasonOOM || (oom && r.Signal == "SIGKILL" && (killedFor == "" || killedFor == sandbox.ReasonOOM)):
		r.Reason = sandbox.ReasonOOM
	case killedFor == sandbox.ReasonOutputLimit:
		r.Reason = sandbox.ReasonOutputLimit
	case pids && failed && killedFor != sandbox.ReasonKilled:
		r.Reason = sandbox.ReasonPids
	case killedFor != "":
		r.Reason = killedFor
	case r.Reason == "":
		r.Reason = sandbox.ReasonExit
	}
}

// SignalName is the conventional name of sig ("SIGKILL").
func SignalName(sig syscall.Signal) string {
	if n, ok := signalNames[sig]; ok {
		return n
	}
	return "SIG" + strconv.Itoa(int(sig))
}

var signalNames = map[syscall.Signal]string{
	1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT",
	7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2",
	13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 16: "SIGSTKFLT", 17: "SIGCHLD", 18: "SIGCONT",
	19: "SIGSTOP", 20: "SIGTSTP", 21: "SIGTTIN", 22: "SIGTTOU", 23: "SIGURG", 24: "SIGXCPU",
	25: "SIGXFSZ", 26: "SIGVTALRM", 27: "SIGPROF", 28: "SIGWINCH", 29: "SIGIO", 30: "SIGPWR", 31: "SIGSYS",
}

// SignalNumber is the number of a signal named as SignalName names it,
// including the "SIG34" form of real-time signals.
func SignalNumber(name string) (syscall.Signal, bool) {
	for n, s := range signalNames {
		if s == name {
			return n, true
		}
	}
	if rest, ok := strings.CutPrefix(name, "SIG"); ok {
		if n, err := strconv.Atoi(rest); err == nil && n > 0 && n <= 64 {
			return syscall.Signal(n), true
		}
	}
	return 0, false
}
