package sandbox

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestValidID(t *testing.T) {
	tests := []struct {
		id   string
		want bool
	}{
		{"a", true},
		{"0", true},
		{"sb-1a2b", true},
		{"a_b-c", true},
		{strings.Repeat("a", 63), true},
		{strings.Repeat("a", 64), false},
		{"", false},
		{"-a", false},
		{"_a", false},
		{"Abc", false},
		{"a.b", false},
		{"a/b", false},
		{"..", false},
		{"a b", false},
		{"a\n", false},
		{"é", false},
	}
	for _, tt := range tests {
		if got := ValidID(tt.id); got != tt.want {
			t.Errorf("ValidID(%q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}

func TestValidImageAndRuntime(t *testing.T) {
	images := map[string]bool{
		"python:3.12": true,
		"registry.example:5000/team/img@sha256:0123abcd": true,
		"a+b_c":                  true,
		strings.Repeat("a", 512): true,
		strings.Repeat("a", 513): false,
		"":                       false,
		"-img":                   false,
		".img":                   false,
		"img name":               false,
		"img\n":                  false,
		"img;rm":                 false,
		"imgé":                   false,
	}
	for s, want := range images {
		if got := validImage(s); got != want {
			t.Errorf("validImage(%q) = %v, want %v", s, got, want)
		}
	}
	runtimes := map[string]bool{
		"runsc": true, "kata-qemu": true, "io.containerd.runc.v2": true,
		strings.Repeat("r", 64): true, strings.Repeat("r", 65): false,
		"": false, "_x": false, "a/b": false, "a:b": false, "a b": false,
	}
	for s, want := range runtimes {
		if got := validRuntime(s); got != want {
			t.Errorf("validRuntime(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestSpecValidate(t *testing.T) {
	// mnt returns a spec with one read-only mount at target.
	mnt := func(source, target string) Spec {
		return Spec{Mounts: []Mount{{Source: source, Target: target}}}
	}
	tests := []struct {
		name string
		spec Spec
		// wantErr is a part of the error message; empty means valid.
		wantErr string
	}{
		{name: "zero value", spec: Spec{}},
		{name: "full valid", spec: Spec{
			ID:            "sb-1",
			Limits:        Limits{MemoryBytes: 1 << 30, CPUs: 2, Pids: 100, Timeout: time.Second, CPUTime: time.Second, Lifetime: time.Hour, DiskBytes: 1, TmpBytes: 1, OutputBytes: 1, OpenFiles: 4096},
			Env:           []string{"A=1", "B=", "C=x=y"},
			Mounts:        []Mount{{Source: "/data", Target: "/mnt/data", Writable: true}, {Source: "/src", Target: "/workspace/src"}},
			Network:       Network{Mode: NetworkNone},
			AllowDegraded: []Layer{LayerCgroups, LayerSeccomp, LayerLandlock, LayerCgroupNS},
		}},

		// ids
		{name: "id 63 chars", spec: Spec{ID: strings.Repeat("x", 63)}},
		{name: "id 64 chars", spec: Spec{ID: strings.Repeat("x", 64)}, wantErr: "sandbox id"},
		{name: "id upper case", spec: Spec{ID: "SB"}, wantErr: "sandbox id"},
		{name: "id with slash", spec: Spec{ID: "a/b"}, wantErr: "sandbox id"},
		{name: "id dot dot", spec: Spec{ID: ".."}, wantErr: "sandbox id"},
		{name: "id leading dash", spec: Spec{ID: "-a"}, wantErr: "sandbox id"},

		// memory: 0 is the default, else at least 4 MiB
		{name: "memory 4 MiB", spec: Spec{Limits: Limits{MemoryBytes: 4 << 20}}},
		{name: "memory 4 MiB - 1", spec: Spec{Limits: Limits{MemoryBytes: 4<<20 - 1}}, wantErr: "memory limit 4194303 bytes"},
		{name: "memory 1", spec: Spec{Limits: Limits{MemoryBytes: 1}}, wantErr: "at least 4 MiB"},
		{name: "memory negative", spec: Spec{Limits: Limits{MemoryBytes: -1}}, wantErr: "memory limit"},

		// cpus: 0 is the default, else at least 0.01
		{name: "cpus 0.01", spec: Spec{Limits: Limits{CPUs: 0.01}}},
		{name: "cpus 0.009", spec: Spec{Limits: Limits{CPUs: 0.009}}, wantErr: "cpus 0.009"},
		{name: "cpus negative", spec: Spec{Limits: Limits{CPUs: -1}}, wantErr: "from 0.01 to 4096"},
		// NaN and infinity are no CPU quota at all: they must be refused,
		// or the sandbox runs with unlimited CPU.
		{name: "cpus NaN", spec: Spec{Limits: Limits{CPUs: math.NaN()}}, wantErr: "cpus"},
		{name: "cpus +Inf", spec: Spec{Limits: Limits{CPUs: math.Inf(1)}}, wantErr: "cpus"},

		// pids: 0 is the default, else at least 2
		{name: "pids 2", spec: Spec{Limits: Limits{Pids: 2}}},
		{name: "pids 1", spec: Spec{Limits: Limits{Pids: 1}}, wantErr: "pids limit 1"},
		{name: "pids negative", spec: Spec{Limits: Limits{Pids: -5}}, wantErr: "at least 2"},

		// durations
		{name: "timeout negative", spec: Spec{Limits: Limits{Timeout: -time.Nanosecond}}, wantErr: "timeouts cannot be negative"},
		{name: "cpu time negative", spec: Spec{Limits: Limits{CPUTime: -time.Second}}, wantErr: "timeouts cannot be negative"},
		{name: "lifetime negative", spec: Spec{Limits: Limits{Lifetime: -time.Second}}, wantErr: "timeouts cannot be negative"},

		// sizes
		{name: "disk negative", spec: Spec{Limits: Limits{DiskBytes: -1}}, wantErr: "sizes cannot be negative"},
		{name: "tmp negative", spec: Spec{Limits: Limits{TmpBytes: -1}}, wantErr: "sizes cannot be negative"},
		{name: "output negative", spec: Spec{Limits: Limits{OutputBytes: -1}}, wantErr: "sizes cannot be negative"},
		{name: "open files negative", spec: Spec{Limits: Limits{OpenFiles: -1}}, wantErr: "sizes cannot be negative"},
		{name: "open files 16", spec: Spec{Limits: Limits{OpenFiles: 16}}},
		{name: "open files 15", spec: Spec{Limits: Limits{OpenFiles: 15}}, wantErr: "open files 15"},

		// environment
		{name: "env empty value", spec: Spec{Env: []string{"K="}}},
		{name: "env no equals", spec: Spec{Env: []string{"K"}}, wantErr: `environment entry "K"`},
		{name: "env empty key", spec: Spec{Env: []string{"=v"}}, wantErr: "KEY=VALUE"},
		{name: "env empty entry", spec: Spec{Env: []string{""}}, wantErr: "KEY=VALUE"},
		{name: "env NUL in value", spec: Spec{Env: []string{"K=a\x00b"}}, wantErr: "KEY=VALUE"},
		{name: "env bad after good", spec: Spec{Env: []string{"A=1", "B"}}, wantErr: `"B"`},

		// mount sources
		{name: "source relative", spec: mnt("data", "/mnt/data"), wantErr: `mount source "data"`},
		{name: "source dot relative", spec: mnt("./data", "/mnt/data"), wantErr: "absolute host path"},
		{name: "source empty", spec: mnt("", "/mnt/data"), wantErr: "mount source"},

		// mount targets
		{name: "target /mnt/data", spec: mnt("/d", "/mnt/data")},
		{name: "target below workspace", spec: mnt("/d", "/workspace/data")},
		{name: "target below tmp", spec: mnt("/d", "/tmp/data")},
		{name: "target /opt", spec: mnt("/d", "/opt")},
		{name: "target /procfs is not /proc", spec: mnt("/d", "/procfs")},
		{name: "target /devices is not /dev", spec: mnt("/d", "/devices")},
		{name: "target relative", spec: mnt("/d", "mnt/data"), wantErr: "clean absolute path"},
		{name: "target empty", spec: mnt("/d", ""), wantErr: "clean absolute path"},
		{name: "target dot dot", spec: mnt("/d", "/mnt/../etc"), wantErr: "clean absolute path"},
		{name: "target trailing slash", spec: mnt("/d", "/mnt/data/"), wantErr: "clean absolute path"},
		{name: "target double slash", spec: mnt("/d", "/mnt//data"), wantErr: "clean absolute path"},
		{name: "target dot", spec: mnt("/d", "/mnt/./data"), wantErr: "clean absolute path"},
		{name: "target /", spec: mnt("/d", "/"), wantErr: "belongs to the sandbox"},
		{name: "target /proc", spec: mnt("/d", "/proc"), wantErr: "/proc belongs to the sandbox"},
		{name: "target /proc/x", spec: mnt("/d", "/proc/x"), wantErr: "/proc belongs to the sandbox"},
		{name: "target /proc/self/x", spec: mnt("/d", "/proc/self/x"), wantErr: "/proc belongs"},
		{name: "target /dev", spec: mnt("/d", "/dev"), wantErr: "/dev belongs"},
		{name: "target /dev/shm", spec: mnt("/d", "/dev/shm"), wantErr: "/dev belongs"},
		{name: "target /sys", spec: mnt("/d", "/sys"), wantErr: "/sys belongs"},
		{name: "target /sys/fs/cgroup", spec: mnt("/d", "/sys/fs/cgroup"), wantErr: "/sys belongs"},
		{name: "target /usr", spec: mnt("/d", "/usr"), wantErr: "/usr belongs"},
		{name: "target /etc", spec: mnt("/d", "/etc"), wantErr: "/etc belongs"},
		{name: "target /tmp", spec: mnt("/d", "/tmp"), wantErr: "/tmp belongs"},
		{name: "target /workspace", spec: mnt("/d", "/workspace"), wantErr: "/workspace belongs"},
		{name: "reserved message names the way out", spec: mnt("/d", "/usr"), wantErr: "mount below /mnt or /workspace instead"},
		{name: "bad mount after good", spec: Spec{Mounts: []Mount{{Source: "/a", Target: "/mnt/a"}, {Source: "/b", Target: "/proc"}}}, wantErr: `"/proc"`},

		// network
		{name: "network none", spec: Spec{Network: Network{Mode: "none"}}},
		{name: "network host", spec: Spec{Network: Network{Mode: "host"}}, wantErr: `network mode "host"`},
		{name: "network NONE", spec: Spec{Network: Network{Mode: "NONE"}}, wantErr: `network mode "NONE": use "none" or "egress"`},
		{name: "egress no rules", spec: Spec{Network: Network{Mode: NetworkEgress}}},
		{name: "egress rules", spec: Spec{Network: Network{Mode: NetworkEgress, AllowHosts: []string{"example.com", "*.pypi.org:443", "Example.COM."}, AllowAddresses: []string{"10.1.2.3:443", "[fd00::1]:8443"}, Deny: []string{"bad.example.com", "10.0.0.0/8", "::1"}, Report: true}}},
		{name: "rules without egress", spec: Spec{Network: Network{AllowHosts: []string{"example.com"}}}, wantErr: `network rules given with network mode "none"`},
		{name: "host with scheme", spec: Spec{Network: Network{Mode: NetworkEgress, AllowHosts: []string{"http://example.com"}}}, wantErr: `host pattern "http://example.com"`},
		{name: "host port zero", spec: Spec{Network: Network{Mode: NetworkEgress, AllowHosts: []string{"example.com:0"}}}, wantErr: `port must be 1-65535`},
		{name: "host inner wildcard", spec: Spec{Network: Network{Mode: NetworkEgress, AllowHosts: []string{"a.*.com"}}}, wantErr: `not a host name`},
		{name: "address without port", spec: Spec{Network: Network{Mode: NetworkEgress, AllowAddresses: []string{"10.1.2.3"}}}, wantErr: `allow address "10.1.2.3": give IP:PORT`},
		{name: "address name", spec: Spec{Network: Network{Mode: NetworkEgress, AllowAddresses: []string{"example.com:443"}}}, wantErr: `allow address "example.com:443"`},
		{name: "deny garbage", spec: Spec{Network: Network{Mode: NetworkEgress, Deny: []string{"a b"}}}, wantErr: `deny rule "a b"`},

		// degraded layers
		{name: "degrade cgroups", spec: Spec{AllowDegraded: []Layer{"cgroups"}}},
		{name: "degrade cgroupns", spec: Spec{AllowDegraded: []Layer{"cgroupns"}}},
		{name: "degrade userns", spec: Spec{AllowDegraded: []Layer{LayerUserNS}}, wantErr: `--allow-degraded "userns"`},
		{name: "degrade rootfs", spec: Spec{AllowDegraded: []Layer{LayerRootFS}}, wantErr: "can be left out"},
		{name: "degrade empty", spec: Spec{AllowDegraded: []Layer{""}}, wantErr: "--allow-degraded"},
		{name: "degrade upper case", spec: Spec{AllowDegraded: []Layer{"Seccomp"}}, wantErr: "--allow-degraded"},
		{name: "degrade unknown after known", spec: Spec{AllowDegraded: []Layer{LayerSeccomp, "all"}}, wantErr: `"all"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.spec.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error containing %q", tt.wantErr)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("Validate() = %v, want it to wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Validate() = %q, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestLimitsWithDefaults(t *testing.T) {
	t.Run("zero gets every default", func(t *testing.T) {
		got := Limits{}.WithDefaults()
		want := Limits{
			MemoryBytes: DefaultMemory, CPUs: DefaultCPUs, Pids: DefaultPids,
			Timeout: DefaultTimeout, CPUTime: 0, Lifetime: DefaultLifetime,
			DiskBytes: DefaultDisk, TmpBytes: DefaultTmp, OutputBytes: DefaultOutputLimit,
			OpenFiles: DefaultOpenFiles,
		}
		if got != want {
			t.Errorf("Limits{}.WithDefaults() = %+v, want %+v", got, want)
		}
		// The documented values, so that a changed constant is noticed.
		if got.MemoryBytes != 512<<20 || got.CPUs != 0.5 || got.Pids != 64 || got.Timeout != 10*time.Second ||
			got.Lifetime != 5*time.Minute || got.DiskBytes != 256<<20 || got.TmpBytes != 64<<20 ||
			got.OutputBytes != 1<<20 || got.OpenFiles != 1024 {
			t.Errorf("defaults changed: %+v", got)
		}
		if err := (Spec{Limits: got}).Validate(); err != nil {
			t.Errorf("the defaults do not validate: %v", err)
		}
	})
	t.Run("set fields are kept", func(t *testing.T) {
		in := Limits{
			MemoryBytes: 1, CPUs: 3, Pids: 7, Timeout: time.Minute, CPUTime: time.Second,
			Lifetime: time.Hour, DiskBytes: 2, TmpBytes: 3, OutputBytes: 4, OpenFiles: 5,
		}
		if got := in.WithDefaults(); got != in {
			t.Errorf("WithDefaults() = %+v, want %+v unchanged", got, in)
		}
	})
	t.Run("each zero field alone", func(t *testing.T) {
		in := Limits{MemoryBytes: 8 << 20, Pids: 10}
		got := in.WithDefaults()
		if got.MemoryBytes != 8<<20 || got.Pids != 10 {
			t.Errorf("set fields changed: %+v", got)
		}
		if got.CPUs != DefaultCPUs || got.DiskBytes != DefaultDisk || got.OpenFiles != DefaultOpenFiles {
			t.Errorf("zero fields not defaulted: %+v", got)
		}
	})
	t.Run("receiver is not modified", func(t *testing.T) {
		var l Limits
		_ = l.WithDefaults()
		if l != (Limits{}) {
			t.Errorf("WithDefaults changed its receiver: %+v", l)
		}
	})
}

func TestExecRequestValidate(t *testing.T) {
	tests := []struct {
		name    string
		req     ExecRequest
		wantErr string
	}{
		{name: "minimal", req: ExecRequest{Argv: []string{"true"}}},
		{name: "full", req: ExecRequest{Argv: []string{"/bin/sh", "-c", "echo hi", ""}, Env: []string{"A=1"}, Dir: "/tmp", Timeout: time.Second, CPUTime: time.Second}},
		{name: "unclean absolute dir is accepted", req: ExecRequest{Argv: []string{"true"}, Dir: "/tmp/../workspace"}},
		{name: "nil argv", req: ExecRequest{}, wantErr: "no command given"},
		{name: "empty argv", req: ExecRequest{Argv: []string{}}, wantErr: "no command given"},
		{name: "empty command", req: ExecRequest{Argv: []string{"", "x"}}, wantErr: "no command given"},
		{name: "NUL in command", req: ExecRequest{Argv: []string{"a\x00b"}}, wantErr: "NUL byte"},
		{name: "NUL in argument", req: ExecRequest{Argv: []string{"echo", "ok", "a\x00"}}, wantErr: "NUL byte"},
		{name: "bad env", req: ExecRequest{Argv: []string{"true"}, Env: []string{"NOEQUALS"}}, wantErr: `environment entry "NOEQUALS"`},
		{name: "env empty key", req: ExecRequest{Argv: []string{"true"}, Env: []string{"=x"}}, wantErr: "KEY=VALUE"},
		{name: "relative dir", req: ExecRequest{Argv: []string{"true"}, Dir: "tmp"}, wantErr: `working directory "tmp"`},
		{name: "negative timeout", req: ExecRequest{Argv: []string{"true"}, Timeout: -1}, wantErr: "timeouts cannot be negative"},
		{name: "negative cpu time", req: ExecRequest{Argv: []string{"true"}, CPUTime: -1}, wantErr: "timeouts cannot be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.req.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error containing %q", tt.wantErr)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("Validate() = %v, want it to wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Validate() = %q, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}
