package hostcap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The runsc airlock builds (`make runsc`, docs/decisions.md): a pinned
// version of the gvisor.dev/gvisor Go module, installed where airlock
// looks first. The Makefile's RUNSC_VERSION must equal RunscVersion.
const (
	// RunscVersion is the gvisor.dev/gvisor module version `make runsc`
	// builds.
	RunscVersion = "v0.0.0-20260905035102-160fafc42237"
	// RunscDir is where `make runsc` installs it.
	RunscDir = "/opt/airlock"
	// EnvRunsc names the variable that points at another runsc to use.
	EnvRunsc = "AIRLOCK_RUNSC"
)

// What the pinned build knows: its platforms, default first, and the flags
// airlock uses when a runsc has them.
var (
	pinnedPlatforms = []string{"systrap", "ptrace", "kvm"}
	pinnedFlags     = []string{"in-sandbox-cgroup", "overlay2", "host-settings", "platform", "network", "root", "ignore-cgroups", "rootless"}
)

// RunscPinnedPath is the runsc `make runsc` builds.
func RunscPinnedPath() string { return filepath.Join(RunscDir, "runsc-"+RunscVersion) }

// runscPinned is RunscPinnedPath, a variable so that tests can move it.
var runscPinned = RunscPinnedPath()

// Runsc describes a runsc binary.
type Runsc struct {
	// Path is the binary.
	Path string
	// Version is RunscVersion for the one airlock built, else what
	// `runsc --version` says ("0.0~20221219.0" for Debian's).
	Version string
	// Pinned says this is the runsc `make runsc` built.
	Pinned bool
	// Platforms are the platforms this build knows, default first.
	Platforms []string
	// flags are the global flags this build knows, without the dash.
	flags []string
}

// ErrNoRunsc says no runsc was found.
var ErrNoRunsc = errors.New("runsc is not installed")

// FindRunsc finds the runsc airlock uses: $AIRLOCK_RUNSC when set, else
// the one `make runsc` built, else runsc on PATH; and asks it what it
// knows (`runsc flags`, and `runsc --version` for one airlock did not
// build). It takes about 10 ms.
func FindRunsc(ctx context.Context) (*Runsc, error) {
	path := os.Getenv(EnvRunsc)
	if path == "" {
		if _, err := os.Stat(runscPinned); err == nil {
			path = runscPinned
		} else if p, err := exec.LookPath("runsc"); err == nil {
			path = p
		} else {
			return nil, fmt.Errorf("%w (not at %s, not on PATH)", ErrNoRunsc, runscPinned)
		}
	}
	return InspectRunsc(ctx, path)
}

// InspectRunsc asks the runsc at path what it is and knows.
func InspectRunsc(ctx context.Context, path string) (*Runsc, error) {
	r := &Runsc{Path: path}
	if path == runscPinned {
		// A module build says "VERSION_MISSING"; its path names it. What
		// it knows is known: asking would cost every `airlock run` a
		// 100 MB program's start (a test checks this against it).
		r.Version, r.Pinned = RunscVersion, true
		r.Platforms, r.flags = slices.Clone(pinnedPlatforms), slices.Clone(pinnedFlags)
		return r, nil
	}
	out, err := runTool(ctx, 5*time.Second, path, "--version")
	if err != nil {
		return nil, fmt.Errorf("runsc does not run: %w", err)
	}
	r.Version = strings.TrimPrefix(firstLine(out), "runsc version ")
	out, err = runTool(ctx, 5*time.Second, path, "flags")
	if err != nil {
		// Not every build has the flags command; the platforms are then
		// found by trying them.
		return r, nil //nolint:nilerr // an old runsc still works
	}
	r.flags, r.Platforms = parseRunscFlags(out)
	return r, nil
}

// parseRunscFlags reads `runsc flags`: the flag names, and the platforms
// from the -platform flag's help ("specifies which platform to use:
// systrap (default), ptrace, kvm."), default first.
func parseRunscFlags(out string) (flags, platforms []string) {
	for _, line := range strings.Split(out, "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(line, "  -") && !strings.HasPrefix(line, "   ") {
			name, _, _ := strings.Cut(strings.TrimPrefix(t, "-"), " ")
			flags = append(flags, name)
			continue
		}
		_, list, ok := strings.Cut(t, "specifies which platform to use:")
		if !ok || platforms != nil {
			continue
		}
		list, _, _ = strings.Cut(list, ".")
		for _, p := range strings.Split(list, ",") {
			name, isDefault := strings.CutSuffix(strings.TrimSpace(p), "(default)")
			name = strings.TrimSpace(name)
			if name == "" {
				continue
			}
			if isDefault {
				platforms = append([]string{name}, platforms...)
			} else {
				platforms = append(platforms, name)
			}
		}
	}
	return flags, platforms
}

// HasFlag says whether this runsc knows the global flag name (no dash).
func (r *Runsc) HasFlag(name string) bool { return slices.Contains(r.flags, name) }

// HasPlatform says whether this runsc knows platform p. When its platforms
// are unknown, only ptrace (every build has it) is assumed.
func (r *Runsc) HasPlatform(p string) bool {
	if len(r.Platforms) == 0 {
		return p == "ptrace"
	}
	return slices.Contains(r.Platforms, p)
}

// DefaultPlatform is the platform airlock uses with this runsc: systrap
// when it has it (faster, the current default), else ptrace. KVM is never
// chosen by itself: on hosts whose /dev/kvm is not the real thing (nested,
// PVM) runsc hangs on it.
func (r *Runsc) DefaultPlatform() string {
	if r.HasPlatform("systrap") {
		return "systrap"
	}
	return "ptrace"
}

// Describe says which runsc this is, for doctor and errors:
// "runsc v0.0.0-… (built by make runsc)", or
// "runsc 0.0~20221219.0 at /usr/bin/runsc (old: ptrace platform only)".
func (r *Runsc) Describe() string {
	if r.Pinned {
		return "runsc " + r.Version + " (built by make runsc)"
	}
	s := "runsc " + r.Version + " at " + r.Path
	if !r.HasPlatform("systrap") {
		s += " (old: no systrap platform; build a current one with `make runsc`)"
	}
	return s
}
