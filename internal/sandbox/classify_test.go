package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestClassify(t *testing.T) {
	type in struct {
		exit      int
		signal    string
		reason    Reason // already set (by an earlier call)
		hit       []Limit
		outTrunc  bool
		errTrunc  bool
		killedFor Reason
		oom       bool
		pids      bool
		diskFull  bool
	}
	killed := func(i in) in { i.exit, i.signal = -1, "SIGKILL"; return i }
	tests := []struct {
		name       string
		in         in
		wantReason Reason
		wantHit    []Limit
	}{
		{name: "clean exit", in: in{}, wantReason: ReasonExit, wantHit: []Limit{}},
		{name: "failed exit", in: in{exit: 3}, wantReason: ReasonExit, wantHit: []Limit{}},
		{name: "ended by a signal of its own", in: in{exit: -1, signal: "SIGSEGV"}, wantReason: ReasonExit, wantHit: []Limit{}},

		// memory
		{name: "oom killed the main process", in: killed(in{oom: true}), wantReason: ReasonOOM, wantHit: []Limit{LimitMemory}},
		{name: "oom named by the agent", in: killed(in{oom: true, killedFor: ReasonOOM}), wantReason: ReasonOOM, wantHit: []Limit{LimitMemory}},
		{name: "earlier oom stays over a later timeout", in: killed(in{reason: ReasonOOM, killedFor: ReasonTimeout}), wantReason: ReasonOOM, wantHit: []Limit{LimitTimeout}},
		{name: "earlier oom with the host's counters", in: killed(in{reason: ReasonOOM, hit: []Limit{LimitMemory}, killedFor: ReasonTimeout, oom: true}), wantReason: ReasonOOM, wantHit: []Limit{LimitMemory, LimitTimeout}},
		{name: "oom killed a child, the command survived", in: in{exit: 1, oom: true}, wantReason: ReasonExit, wantHit: []Limit{LimitMemory}},
		{name: "oom killed a child, the command exited 0", in: in{oom: true}, wantReason: ReasonExit, wantHit: []Limit{LimitMemory}},
		// The timeout's SIGKILL ended the main process; an OOM kill of
		// another process is noted in limits_hit.
		{name: "oom elsewhere, timeout killed the command", in: killed(in{oom: true, killedFor: ReasonTimeout}), wantReason: ReasonTimeout, wantHit: []Limit{LimitMemory, LimitTimeout}},
		{name: "oom elsewhere, killed on request", in: killed(in{oom: true, killedFor: ReasonKilled}), wantReason: ReasonKilled, wantHit: []Limit{LimitMemory}},
		{name: "oom counted but SIGTERM ended it", in: in{exit: -1, signal: "SIGTERM", oom: true}, wantReason: ReasonExit, wantHit: []Limit{LimitMemory}},

		// output
		{name: "output limit", in: killed(in{outTrunc: true, killedFor: ReasonOutputLimit}), wantReason: ReasonOutputLimit, wantHit: []Limit{LimitOutput}},
		{name: "stderr output limit", in: killed(in{errTrunc: true, killedFor: ReasonOutputLimit}), wantReason: ReasonOutputLimit, wantHit: []Limit{LimitOutput}},
		{name: "output cut but the command exited first", in: in{outTrunc: true}, wantReason: ReasonExit, wantHit: []Limit{LimitOutput}},
		{name: "output limit over pids", in: killed(in{outTrunc: true, pids: true, killedFor: ReasonOutputLimit}), wantReason: ReasonOutputLimit, wantHit: []Limit{LimitPids, LimitOutput}},

		// pids
		{name: "fork failed and the command failed", in: in{exit: 1, pids: true}, wantReason: ReasonPids, wantHit: []Limit{LimitPids}},
		{name: "fork failed but the command succeeded", in: in{pids: true}, wantReason: ReasonExit, wantHit: []Limit{LimitPids}},
		{name: "fork bomb ran into the timeout", in: killed(in{pids: true, killedFor: ReasonTimeout}), wantReason: ReasonPids, wantHit: []Limit{LimitPids, LimitTimeout}},
		{name: "fork failed, killed on request", in: killed(in{pids: true, killedFor: ReasonKilled}), wantReason: ReasonKilled, wantHit: []Limit{LimitPids}},
		{name: "oom over pids", in: killed(in{oom: true, pids: true}), wantReason: ReasonOOM, wantHit: []Limit{LimitMemory, LimitPids}},

		// who killed it
		{name: "killed on request", in: killed(in{killedFor: ReasonKilled}), wantReason: ReasonKilled, wantHit: []Limit{}},
		{name: "cpu time", in: killed(in{killedFor: ReasonCPUTime}), wantReason: ReasonCPUTime, wantHit: []Limit{LimitCPUTime}},
		{name: "timeout", in: killed(in{killedFor: ReasonTimeout}), wantReason: ReasonTimeout, wantHit: []Limit{LimitTimeout}},
		{name: "timeout that the command outlived by exiting", in: in{exit: 0, killedFor: ReasonTimeout}, wantReason: ReasonTimeout, wantHit: []Limit{LimitTimeout}},

		// disk
		{name: "disk full", in: in{exit: 1, diskFull: true}, wantReason: ReasonExit, wantHit: []Limit{LimitDiskFull}},

		// accumulation
		{name: "earlier limits are kept", in: in{hit: []Limit{LimitPids}}, wantReason: ReasonExit, wantHit: []Limit{LimitPids}},
		{name: "no duplicates", in: killed(in{hit: []Limit{LimitTimeout, LimitMemory}, killedFor: ReasonTimeout, oom: true}), wantReason: ReasonTimeout, wantHit: []Limit{LimitTimeout, LimitMemory}},
		{name: "everything at once", in: killed(in{outTrunc: true, errTrunc: true, killedFor: ReasonTimeout, oom: true, pids: true, diskFull: true}), wantReason: ReasonPids,
			wantHit: []Limit{LimitMemory, LimitPids, LimitDiskFull, LimitOutput, LimitTimeout}},

		// a reason set earlier and no new cause
		{name: "error is kept", in: in{exit: 125, reason: ReasonError}, wantReason: ReasonError, wantHit: []Limit{}},
		{name: "denied is kept", in: in{reason: ReasonDenied}, wantReason: ReasonDenied, wantHit: []Limit{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Result{ExitCode: tt.in.exit, Signal: tt.in.signal, Reason: tt.in.reason, LimitsHit: tt.in.hit,
				StdoutTruncated: tt.in.outTrunc, StderrTruncated: tt.in.errTrunc}
			r.Classify(tt.in.killedFor, Evidence{OOM: tt.in.oom, Pids: tt.in.pids, DiskFull: tt.in.diskFull})
			if r.Reason != tt.wantReason {
				t.Errorf("Reason = %q, want %q", r.Reason, tt.wantReason)
			}
			if !reflect.DeepEqual(r.LimitsHit, tt.wantHit) {
				t.Errorf("LimitsHit = %#v, want %#v", r.LimitsHit, tt.wantHit)
			}
			if r.ExitCode != tt.in.exit || r.Signal != tt.in.signal {
				t.Errorf("Classify changed the exit status to %d %q", r.ExitCode, r.Signal)
			}
		})
	}
}

func TestClassifyLimitsHitIsNeverNull(t *testing.T) {
	var r Result
	r.Classify("", Evidence{OOM: false, Pids: false, DiskFull: false})
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if l, ok := m["limits_hit"].([]any); !ok || len(l) != 0 {
		t.Errorf("limits_hit = %#v, want []", m["limits_hit"])
	}
}

// The host classifies again with its own counters; it can only add.
func TestClassifySecondCall(t *testing.T) {
	tests := []struct {
		name string
		// the agent's call
		agentKilled         Reason
		agentOOM, agentPids bool
		// the host's call: its own counters, the agent's reason as killedFor
		hostOOM, hostPids bool
		exit              int
		signal            string
		wantReason        Reason
		wantHit           []Limit
	}{
		{
			name: "host sees an oom kill the agent missed", exit: -1, signal: "SIGKILL",
			hostOOM: true, wantReason: ReasonOOM, wantHit: []Limit{LimitMemory},
		},
		{
			name: "host adds memory to a timeout", exit: -1, signal: "SIGKILL", agentKilled: ReasonTimeout,
			hostOOM: true, wantReason: ReasonTimeout, wantHit: []Limit{LimitTimeout, LimitMemory},
		},
		{
			name: "host counters empty: the agent's pids stay", exit: 1, agentPids: true,
			wantReason: ReasonPids, wantHit: []Limit{LimitPids},
		},
		{
			name: "host counters empty: the agent's oom stays", exit: -1, signal: "SIGKILL", agentOOM: true,
			wantReason: ReasonOOM, wantHit: []Limit{LimitMemory},
		},
		{
			name: "both see pids", exit: 2, agentPids: true, hostPids: true,
			wantReason: ReasonPids, wantHit: []Limit{LimitPids},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Result{ExitCode: tt.exit, Signal: tt.signal}
			r.Classify(tt.agentKilled, Evidence{OOM: tt.agentOOM, Pids: tt.agentPids, DiskFull: false})
			first := append([]Limit(nil), r.LimitsHit...)
			// As the native driver does: the agent's reason becomes
			// killedFor unless it is "exit", and the reason is cleared.
			killedFor := r.Reason
			if killedFor == ReasonExit {
				killedFor = ""
			}
			r.Reason = ""
			r.Classify(killedFor, Evidence{OOM: tt.hostOOM, Pids: tt.hostPids, DiskFull: false})
			if r.Reason != tt.wantReason {
				t.Errorf("Reason = %q, want %q", r.Reason, tt.wantReason)
			}
			if !reflect.DeepEqual(r.LimitsHit, tt.wantHit) {
				t.Errorf("LimitsHit = %v, want %v", r.LimitsHit, tt.wantHit)
			}
			for _, l := range first {
				if !r.Hit(l) {
					t.Errorf("the second call removed %s", l)
				}
			}
		})
	}
}

func TestSignalName(t *testing.T) {
	tests := []struct {
		sig  syscall.Signal
		want string
	}{
		{syscall.SIGKILL, "SIGKILL"},
		{syscall.SIGTERM, "SIGTERM"},
		{syscall.SIGSEGV, "SIGSEGV"},
		{syscall.SIGXCPU, "SIGXCPU"},
		{syscall.SIGSYS, "SIGSYS"},
		{0, "SIG0"},
		{34, "SIG34"},
		{64, "SIG64"},
	}
	for _, tt := range tests {
		if got := SignalName(tt.sig); got != tt.want {
			t.Errorf("SignalName(%d) = %q, want %q", tt.sig, got, tt.want)
		}
	}
	// The table agrees with the kernel's names.
	for n := syscall.Signal(1); n <= 31; n++ {
		if got, want := SignalName(n), unix.SignalName(n); got != want {
			t.Errorf("SignalName(%d) = %q, x/sys/unix says %q", n, got, want)
		}
	}
}

func TestSignalNumber(t *testing.T) {
	for _, tt := range []struct {
		name string
		want syscall.Signal
		ok   bool
	}{
		{"SIGKILL", 9, true},
		{"SIGHUP", 1, true},
		{"SIGSYS", 31, true},
		{"KILL", 0, false},
		{"sigkill", 0, false},
		{"", 0, false},
		{"SIG", 0, false},
		{"SIGNOPE", 0, false},
	} {
		got, ok := SignalNumber(tt.name)
		if got != tt.want || ok != tt.ok {
			t.Errorf("SignalNumber(%q) = %d, %v, want %d, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

// Every signal a command can die of must come back as its number: the CLI
// exits with 128+N from the name. Linux has 64 signals, the real-time ones
// (32-64) included; a shell reports `kill -34` as 162.
func TestSignalRoundTrip(t *testing.T) {
	var lost []string
	for n := syscall.Signal(1); n <= 64; n++ {
		name := SignalName(n)
		if got, ok := SignalNumber(name); !ok || got != n {
			lost = append(lost, fmt.Sprintf("%d→%q→%d,%v", n, name, got, ok))
		}
	}
	if len(lost) > 0 {
		t.Errorf("SignalNumber(SignalName(n)) != n for %d signals: %s", len(lost), strings.Join(lost, " "))
	}
}

func TestParseSignal(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want syscall.Signal
		bad  bool
	}{
		{in: "SIGTERM", want: syscall.SIGTERM},
		{in: "term", want: syscall.SIGTERM},
		{in: "KILL", want: syscall.SIGKILL},
		{in: "WINCH", want: syscall.SIGWINCH},
		{in: "SIGPIPE", want: syscall.SIGPIPE},
		{in: "sigtstp", want: syscall.SIGTSTP},
		{in: "SIG34", want: syscall.Signal(34)},
		{in: "9", want: syscall.SIGKILL},
		{in: "64", want: syscall.Signal(64)},
		{in: "0", bad: true},
		{in: "65", bad: true},
		{in: "-1", bad: true},
		{in: "SIG65", bad: true},
		{in: "BOGUS", bad: true},
		{in: "", bad: true},
	} {
		got, err := ParseSignal(tt.in)
		if tt.bad {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("ParseSignal(%q) = %v, %v: want ErrInvalid", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseSignal(%q) = %v, %v: want %v", tt.in, got, err, tt.want)
		}
	}
}
