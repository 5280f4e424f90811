package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64 // 0: an error
	}{
		{"256M", 256 << 20},
		{"256m", 256 << 20},
		{"1G", 1 << 30},
		{"1g", 1 << 30},
		{"1.5g", 3 << 29},
		{"1.5G", 1610612736},
		{"512k", 512 << 10},
		{"512K", 512 << 10},
		{"100", 100},
		{"100b", 100},
		{"100B", 100},
		{"10MiB", 10 << 20},
		{"10mib", 10 << 20},
		{"10MB", 10 << 20},
		{"2KiB", 2 << 10},
		{"1t", 1 << 40},
		{" 64M ", 64 << 20},
		{"1024P", 0},
		{"0", 0},
		{"0M", 0},
		{"-1", 0},
		{"-1M", 0},
		{"", 0},
		{"M", 0},
		{"abc", 0},
		{"1X", 0},
		{"1 M", 0},
		{"1MM", 0},
		{"inf", 0},
		{"Inf", 0},
		{"1e300", 0},
		{"1048576T", 0}, // past the 1 PiB cap
		// Not a number of bytes: NaN passes "v <= 0" and the cap.
		{"nan", 0},
		{"NaN", 0},
		// Half a byte rounds to 0, which a Spec reads as "the default":
		// --memory 0.5 would quietly mean 512 MiB.
		{"0.5", 0},
		{"0.4b", 0},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSize("--memory", tt.in)
			if tt.want == 0 {
				if err == nil {
					t.Fatalf("ParseSize(%q) = %d, want an error", tt.in, got)
				}
				if !strings.Contains(err.Error(), "--memory") || !strings.Contains(err.Error(), strconv.Quote(tt.in)) {
					t.Errorf("error %q does not name the flag and the value", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("ParseSize(%q) = %d, %v, want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestParseMount(t *testing.T) {
	tests := []struct {
		in      string
		want    sandbox.Mount
		wantErr bool
	}{
		{in: "/data:/mnt/data", want: sandbox.Mount{Source: "/data", Target: "/mnt/data"}},
		{in: "/data:/mnt/data:ro", want: sandbox.Mount{Source: "/data", Target: "/mnt/data"}},
		{in: "/data:/mnt/data:rw", want: sandbox.Mount{Source: "/data", Target: "/mnt/data", Writable: true}},
		{in: "/data:/w:cow", want: sandbox.Mount{Source: "/data", Target: "/w", Cow: true}},
		{in: "/a b:/mnt/a b", want: sandbox.Mount{Source: "/a b", Target: "/mnt/a b"}},
		{in: "/data:/w:COW", wantErr: true},
		{in: "", wantErr: true},
		{in: "/data", wantErr: true},
		{in: "/data:/mnt/data:RW", wantErr: true},
		{in: "/data:/mnt/data:rx", wantErr: true},
		{in: "/data:/mnt/data:", wantErr: true},
		{in: "/data:/mnt/data:ro:rw", wantErr: true},
		{in: "/a:b:/mnt/x", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseMount(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseMount(%q) = %+v, want an error", tt.in, got)
				}
				if !strings.Contains(err.Error(), "HOST:PATH") || !strings.Contains(err.Error(), strconv.Quote(tt.in)) {
					t.Errorf("error %q does not show the form", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("ParseMount(%q) = %+v, %v, want %+v", tt.in, got, err, tt.want)
			}
		})
	}
	// Empty halves parse, and the Spec refuses them.
	for _, in := range []string{":/mnt/x", "/data:", "relative:/mnt/x", "/data:mnt"} {
		m, err := ParseMount(in)
		if err != nil {
			t.Errorf("ParseMount(%q): %v", in, err)
			continue
		}
		if err := (sandbox.Spec{Mounts: []sandbox.Mount{m}}).Validate(); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("mount %q validates: %v", in, err)
		}
	}
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		name string
		res  sandbox.Result
		want int
	}{
		{"exit 0", sandbox.Result{ExitCode: 0}, 0},
		{"exit 3", sandbox.Result{ExitCode: 3}, 3},
		{"exit 255", sandbox.Result{ExitCode: 255}, 255},
		{"not found", sandbox.Result{ExitCode: 127}, 127},
		{"SIGKILL", sandbox.Result{ExitCode: -1, Signal: "SIGKILL"}, 137},
		{"SIGTERM", sandbox.Result{ExitCode: -1, Signal: "SIGTERM"}, 143},
		{"SIGSEGV", sandbox.Result{ExitCode: -1, Signal: "SIGSEGV"}, 139},
		{"SIGHUP", sandbox.Result{ExitCode: -1, Signal: "SIGHUP"}, 129},
		{"SIGXCPU", sandbox.Result{ExitCode: -1, Signal: "SIGXCPU"}, 152},
		{"SIGSYS", sandbox.Result{ExitCode: -1, Signal: "SIGSYS"}, 159},
		// A shell reports `kill -34 $$` as 162; the agent names it SIG34.
		{"real-time signal", sandbox.Result{ExitCode: -1, Signal: "SIG34"}, 162},
		{"timeout kill", sandbox.Result{ExitCode: -1, Signal: "SIGKILL", Reason: sandbox.ReasonTimeout}, 137},
	}
	for _, tt := range tests {
		if got := exitCode(tt.res); got != tt.want {
			t.Errorf("%s: exitCode = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestEncode(t *testing.T) {
	tests := []struct {
		name     string
		in       []byte
		want     string
		wantEnc  string
		wantBack []byte
	}{
		{"empty", nil, "", "utf-8", nil},
		{"ascii", []byte("hello\n"), "hello\n", "utf-8", nil},
		{"utf-8", []byte("grüße ✓\n"), "grüße ✓\n", "utf-8", nil},
		{"NUL is valid utf-8", []byte("a\x00b"), "a\x00b", "utf-8", nil},
		{"binary", []byte{0xff, 0xfe, 0x00, 0x01}, "//4AAQ==", "base64", []byte{0xff, 0xfe, 0x00, 0x01}},
		{"cut rune", []byte("gr\xc3"), "Z3LD", "base64", []byte("gr\xc3")},
	}
	for _, tt := range tests {
		s, enc := encode(tt.in)
		if s != tt.want || enc != tt.wantEnc {
			t.Errorf("%s: encode = %q %q, want %q %q", tt.name, s, enc, tt.want, tt.wantEnc)
		}
		if enc == "base64" {
			back, err := base64.StdEncoding.DecodeString(s)
			if err != nil || !bytes.Equal(back, tt.wantBack) {
				t.Errorf("%s: base64 decodes to %q, %v", tt.name, back, err)
			}
		}
	}
}

// defaultFlags returns the run command's flag defaults, read from the
// command itself.
func defaultFlags(t *testing.T) runFlags {
	t.Helper()
	fl := newRunCmd().Flags()
	def := func(name string) string {
		f := fl.Lookup(name)
		if f == nil {
			t.Fatalf("no flag --%s", name)
		}
		return f.DefValue
	}
	cpus, err := strconv.ParseFloat(def("cpus"), 64)
	if err != nil {
		t.Fatal(err)
	}
	pids, err := strconv.Atoi(def("pids"))
	if err != nil {
		t.Fatal(err)
	}
	timeout, err := time.ParseDuration(def("timeout"))
	if err != nil {
		t.Fatal(err)
	}
	cpuTime, err := time.ParseDuration(def("cpu-time"))
	if err != nil {
		t.Fatal(err)
	}
	return runFlags{
		driver: def("driver"), memory: def("memory"), disk: def("disk"), tmp: def("tmp"), outputLimit: def("output-limit"),
		cpus: cpus, pids: pids, timeout: timeout, cpuTime: cpuTime,
	}
}

func TestRunFlagsSpec(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		f := defaultFlags(t)
		s, err := f.spec()
		if err != nil {
			t.Fatalf("spec: %v", err)
		}
		want := sandbox.Limits{
			MemoryBytes: 512 << 20, CPUs: 0.5, Pids: 64, Timeout: 10 * time.Second,
			DiskBytes: 256 << 20, TmpBytes: 64 << 20, OutputBytes: 1 << 20,
		}
		if s.Limits != want {
			t.Errorf("limits = %+v, want %+v", s.Limits, want)
		}
		// The flags' defaults are the Spec's.
		if d := (sandbox.Limits{}).WithDefaults(); s.Limits.WithDefaults() != d {
			t.Errorf("flag defaults %+v differ from the Spec's %+v", s.Limits.WithDefaults(), d)
		}
		if s.ID != "" || s.Root != "" || len(s.Mounts) != 0 || len(s.Env) != 0 || len(s.AllowDegraded) != 0 || s.Network.Mode != "" {
			t.Errorf("default spec is not minimal: %+v", s)
		}
	})
	t.Run("everything set", func(t *testing.T) {
		f := defaultFlags(t)
		f.memory, f.disk, f.tmp, f.outputLimit = "1G", "2g", "10M", "64k"
		f.cpus, f.pids, f.timeout, f.cpuTime = 2, 100, time.Minute, 5*time.Second
		f.root = "/srv/rootfs"
		f.mounts = []string{"/data:/mnt/data", "/out:/mnt/out:rw"}
		f.degraded = []string{"landlock", "seccomp"}
		f.env = []string{"A=1"} // environ's business, not the spec's
		s, err := f.spec()
		if err != nil {
			t.Fatalf("spec: %v", err)
		}
		want := sandbox.Spec{
			Root: "/srv/rootfs",
			Limits: sandbox.Limits{MemoryBytes: 1 << 30, CPUs: 2, Pids: 100, Timeout: time.Minute, CPUTime: 5 * time.Second,
				DiskBytes: 2 << 30, TmpBytes: 10 << 20, OutputBytes: 64 << 10},
			Mounts:        []sandbox.Mount{{Source: "/data", Target: "/mnt/data"}, {Source: "/out", Target: "/mnt/out", Writable: true}},
			AllowDegraded: []sandbox.Layer{sandbox.LayerLandlock, sandbox.LayerSeccomp},
		}
		if !reflect.DeepEqual(s, want) {
			t.Errorf("spec =\n %+v\nwant\n %+v", s, want)
		}
	})
	tests := []struct {
		name    string
		change  func(f *runFlags)
		wantErr string
	}{
		{"memory 0", func(f *runFlags) { f.memory = "0" }, "--memory"},
		{"memory too small", func(f *runFlags) { f.memory = "1M" }, "at least 4 MiB"},
		{"disk bad", func(f *runFlags) { f.disk = "big" }, "--disk"},
		{"tmp bad", func(f *runFlags) { f.tmp = "-5M" }, "--tmp"},
		{"output limit bad", func(f *runFlags) { f.outputLimit = "" }, "--output-limit"},
		{"cpus 0", func(f *runFlags) { f.cpus = 0 }, "--cpus"},
		{"cpus negative", func(f *runFlags) { f.cpus = -1 }, "--cpus"},
		{"cpus too small", func(f *runFlags) { f.cpus = 0.001 }, "from 0.01 to 4096"},
		{"cpus NaN", func(f *runFlags) { f.cpus = math.NaN() }, "cpus"},
		{"cpus +Inf", func(f *runFlags) { f.cpus = math.Inf(1) }, "cpus"},
		{"pids 0", func(f *runFlags) { f.pids = 0 }, "--pids"},
		{"pids 1", func(f *runFlags) { f.pids = 1 }, "at least 2"},
		{"timeout 0", func(f *runFlags) { f.timeout = 0 }, "--timeout"},
		{"cpu time negative", func(f *runFlags) { f.cpuTime = -time.Second }, "--cpu-time"},
		{"mount bad form", func(f *runFlags) { f.mounts = []string{"/data"} }, "HOST:PATH"},
		{"mount relative source", func(f *runFlags) { f.mounts = []string{"data:/mnt/data"} }, "absolute host path"},
		{"mount reserved target", func(f *runFlags) { f.mounts = []string{"/data:/proc"} }, "/proc belongs to the sandbox"},
		{"mount over /usr", func(f *runFlags) { f.mounts = []string{"/data:/usr"} }, "belongs to the sandbox"},
		{"degrade userns", func(f *runFlags) { f.degraded = []string{"userns"} }, "--allow-degraded"},
		{"image on wasm", func(f *runFlags) { f.driver, f.image = "wasm", "python:3.12-slim" }, "--image is for --driver native or --driver docker or --driver gvisor or --driver kubernetes or --driver microvm, not --driver wasm"},
		{"runtime on native", func(f *runFlags) { f.runtime = "runc" }, "--runtime is for --driver docker or --driver kubernetes, not --driver native"},
		{"runtime on gvisor", func(f *runFlags) { f.driver, f.runtime = "gvisor", "runsc" }, "--runtime is for --driver docker or --driver kubernetes, not --driver gvisor"},
		{"kubeconfig on docker", func(f *runFlags) { f.driver, f.kubeconfig = "docker", "/k" }, "--kubeconfig is for --driver kubernetes, not --driver docker"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := defaultFlags(t)
			tt.change(&f)
			s, err := f.spec()
			if err == nil {
				t.Fatalf("spec() = %+v, want an error containing %q", s.Limits, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("spec() = %q, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestRunFlagsEnviron(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_COPY", "copied value")
	t.Setenv("AIRLOCK_TEST_EMPTY", "")
	tests := []struct {
		name    string
		env     []string
		want    []string
		wantErr bool
	}{
		{name: "none", env: nil, want: nil},
		{name: "set", env: []string{"A=1", "B=x=y", "C="}, want: []string{"A=1", "B=x=y", "C="}},
		{name: "copy", env: []string{"AIRLOCK_TEST_COPY"}, want: []string{"AIRLOCK_TEST_COPY=copied value"}},
		{name: "copy empty", env: []string{"AIRLOCK_TEST_EMPTY"}, want: []string{"AIRLOCK_TEST_EMPTY="}},
		{name: "copy unset is left out", env: []string{"AIRLOCK_TEST_UNSET_VARIABLE", "A=1"}, want: []string{"A=1"}},
		{name: "order kept", env: []string{"Z=1", "AIRLOCK_TEST_COPY", "A=2"}, want: []string{"Z=1", "AIRLOCK_TEST_COPY=copied value", "A=2"}},
		{name: "empty", env: []string{""}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := runFlags{env: tt.env}.environ()
			if tt.wantErr {
				if err == nil {
					t.Fatalf("environ() = %q, want an error", got)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("environ() = %q, %v, want %q", got, err, tt.want)
			}
		})
	}
}

// TestRunInProcess runs the CLI in this process for what fails before a
// sandbox is made.
func TestRunInProcess(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr string // a part of stderr
		wantJSON   bool   // stdout is the --json error object
	}{
		{"no subcommand", []string{}, 0, "", false},
		{"unknown subcommand", []string{"nope"}, 125, "airlock: unknown command \"nope\"", false},
		{"run without a command", []string{"run"}, 125, "airlock: requires at least 1 arg", false},
		{"unknown flag", []string{"run", "--bogus", "--", "true"}, 125, "airlock: unknown flag: --bogus", false},
		{"bad flag value", []string{"run", "--pids", "many", "--", "true"}, 125, "airlock: invalid argument \"many\"", false},
		{"memory 0", []string{"run", "--memory", "0", "--", "true"}, 125, "airlock: --memory \"0\": give a positive size", false},
		{"bad mount", []string{"run", "--mount", "/x", "--", "true"}, 125, "airlock: --mount \"/x\"", false},
		{"bad env", []string{"run", "--env", "", "--", "true"}, 125, "airlock: --env needs KEY=VALUE or KEY", false},
		{"other driver", []string{"run", "--driver", "firecracker", "--", "true"}, 125, "driver \"firecracker\" is not available", false},
		{"degrade userns", []string{"run", "--allow-degraded", "userns", "--", "true"}, 125, "--allow-degraded \"userns\"", false},
		{"json memory 0", []string{"run", "--json", "--memory", "0", "--", "true"}, 125, "", true},
		{"json other driver", []string{"run", "--json", "--driver", "firecracker", "--", "true"}, 125, "", true},
		{"flags after the command are the command's", []string{"run", "--memory", "0", "--", "sh", "--bogus"}, 125, "--memory", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tt.args, strings.NewReader(""), &stdout, &stderr)
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d (stderr %q)", code, tt.wantCode, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr %q lacks %q", stderr.String(), tt.wantStderr)
			}
			if tt.wantStderr != "" && strings.Count(stderr.String(), "\n") != 1 {
				t.Errorf("stderr is not one line: %q", stderr.String())
			}
			if !tt.wantJSON {
				return
			}
			if stderr.Len() != 0 {
				t.Errorf("--json wrote to stderr: %q", stderr.String())
			}
			var out map[string]any
			dec := json.NewDecoder(&stdout)
			if err := dec.Decode(&out); err != nil {
				t.Fatalf("stdout is not JSON: %v", err)
			}
			if dec.More() {
				t.Error("more than one JSON value on stdout")
			}
			if out["exit_code"] != float64(125) || out["reason"] != "error" || out["message"] == "" {
				t.Errorf("json = %v", out)
			}
		})
	}
}
