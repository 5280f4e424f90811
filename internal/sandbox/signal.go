package sandbox

import (
	"strconv"
	"strings"
	"syscall"
)

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

// ParseSignal reads a signal as callers write it: a name with or without
// "SIG", in any case ("SIGTERM", "term"), the "SIG34" form of real-time
// signals, or a number from 1 to 64. The API, MCP and the CLI take the same
// signals through it.
func ParseSignal(s string) (syscall.Signal, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.Atoi(s); err == nil {
		if n < 1 || n > 64 {
			return 0, invalid("signal %d: give 1 to 64", n)
		}
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig, ok := SignalNumber(name); ok {
		return sig, nil
	}
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return 0, invalid("signal %q: give a name like SIGTERM or TERM, or a number from 1 to 64", s)
}
