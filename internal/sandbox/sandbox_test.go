package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestResultHit(t *testing.T) {
	tests := []struct {
		name string
		hit  []Limit
		l    Limit
		want bool
	}{
		{"nil list", nil, LimitMemory, false},
		{"empty list", []Limit{}, LimitMemory, false},
		{"only entry", []Limit{LimitMemory}, LimitMemory, true},
		{"last entry", []Limit{LimitTimeout, LimitPids, LimitOutput}, LimitOutput, true},
		{"absent", []Limit{LimitTimeout, LimitPids}, LimitCPUTime, false},
		{"empty limit", []Limit{LimitTimeout}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := (Result{LimitsHit: tt.hit}).Hit(tt.l); got != tt.want {
				t.Errorf("Hit(%q) with %v = %v, want %v", tt.l, tt.hit, got, tt.want)
			}
		})
	}
}

func TestLayerError(t *testing.T) {
	tests := []struct {
		name string
		err  *LayerError
		want []string // parts of the message
		not  []string
	}{
		{
			name: "with fix",
			err:  &LayerError{Layer: LayerSeccomp, Why: "the kernel has no seccomp filters", Fix: "use a kernel with CONFIG_SECCOMP_FILTER"},
			want: []string{
				"isolation layer seccomp is unavailable",
				"the kernel has no seccomp filters",
				"; fix: use a kernel with CONFIG_SECCOMP_FILTER",
				"--allow-degraded seccomp",
			},
		},
		{
			name: "without fix",
			err:  &LayerError{Layer: LayerLandlock, Why: "no landlock"},
			want: []string{"isolation layer landlock is unavailable: no landlock", "(or accept running without it: --allow-degraded landlock)"},
			not:  []string{"fix:"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := tt.err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q lacks %q", msg, w)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(msg, n) {
					t.Errorf("message %q has %q", msg, n)
				}
			}
			if !errors.Is(tt.err, ErrUnsupported) {
				t.Error("a LayerError does not match ErrUnsupported")
			}
			wrapped := fmt.Errorf("create sandbox: %w", tt.err)
			var le *LayerError
			if !errors.As(wrapped, &le) || le.Layer != tt.err.Layer {
				t.Errorf("errors.As through a wrap lost the layer: %v", le)
			}
			if !errors.Is(wrapped, ErrUnsupported) {
				t.Error("a wrapped LayerError does not match ErrUnsupported")
			}
			if errors.Is(tt.err, ErrInvalid) {
				t.Error("a LayerError matches ErrInvalid")
			}
		})
	}
}

func TestCommandError(t *testing.T) {
	var err error = &CommandError{Code: 127, Msg: "nope: not found"}
	if err.Error() != "nope: not found" {
		t.Errorf("Error() = %q", err.Error())
	}
	var ce *CommandError
	if !errors.As(fmt.Errorf("exec: %w", err), &ce) || ce.Code != 127 {
		t.Errorf("errors.As = %v", ce)
	}
}

func TestDegradableLayers(t *testing.T) {
	// The layers that keep the sandbox a sandbox must never be optional.
	for _, l := range []Layer{LayerUserNS, LayerPidNS, LayerMountNS, LayerNetNS, LayerNoNewPrivs, LayerCaps, LayerUIDRange, LayerRootFS} {
		if slices.Contains(DegradableLayers, l) {
			t.Errorf("%s is degradable", l)
		}
	}
	for _, l := range DegradableLayers {
		if err := (Spec{AllowDegraded: []Layer{l}}).Validate(); err != nil {
			t.Errorf("degradable layer %s does not validate: %v", l, err)
		}
	}
}

func TestResultJSON(t *testing.T) {
	// The wire and --json names are a contract.
	r := Result{ExitCode: -1, Signal: "SIGKILL", Reason: ReasonTimeout, LimitsHit: []Limit{LimitTimeout},
		Message: "m", StdoutTruncated: true, Usage: Usage{WallMS: 1, CPUMS: 2, MemoryPeakBytes: 3, BytesWritten: 4}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"exit_code":-1,"signal":"SIGKILL","reason":"timeout","limits_hit":["timeout"],"message":"m","stdout_truncated":true,"stderr_truncated":false,"usage":{"wall_ms":1,"cpu_ms":2,"memory_peak_bytes":3,"bytes_written":4}}`
	if string(b) != want {
		t.Errorf("json = %s\nwant   %s", b, want)
	}
	var back Result
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !back.Hit(LimitTimeout) || back.Usage != r.Usage || back.Signal != r.Signal {
		t.Errorf("round trip = %+v", back)
	}
}
