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
