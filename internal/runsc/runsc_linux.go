// Package runsc finds the gVisor runtime (runsc) airlock uses and says
// what it knows: its version, platforms and flags. It is apart from
// hostcap, whose probes link test rigs and other drivers, so that the
// gVisor driver links only this.
package runsc

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
// looks first. The Makefile's RUNSC_VERSION must equal Version.
const (
	// Version is the gvisor.dev/gvisor module version `make runsc`
	// builds.
	Version = "v0.0.0-20260905035102-160fafc42237"
	// Dir is where `make runsc` installs it.
	Dir = "/opt/airlock"
	// Env names the variable that points at another runsc to use.
	Env = "AIRLOCK_RUNSC"
)

// What the pinned build knows: its platforms, default first, and the flags
// airlock uses when a runsc has them.
var (
	pinnedPlatforms = []string{"systrap", "ptrace", "kvm"}
	pinnedFlags     = []string{"in-sandbox-cgroup", "overlay2", "host-settings", "platform", "network", "root", "ignore-cgroups", "rootless"}
)

// PinnedPath is the runsc `make runsc` builds.
func PinnedPath() string { return filepath.Join(Dir, "runsc-"+Version) }

// Pinned is where Find looks first: PinnedPath, a variable so that tests
// (here and in hostcap) can move it.
var Pinned = PinnedPath()

// Binary describes a runsc binary.
type Binary struct {
	// Path is the binary.
	Path string
	// Version is Version for the one airlock built, else what
	// `runsc --version` says ("0.0~20221219.0" for Debian's).
	Version string
	// Pinned says this is the runsc `make runsc` built.
	Pinned bool
	// Platforms are the platforms this build knows, default first.
	Platforms []string
	// flags are the global flags this build knows, without the dash.
	flags []string
}

// ErrNotFound says no runsc was found.
var ErrNotFound = errors.New("runsc is not installed")

// Find finds the runsc airlock uses: $AIRLOCK_RUNSC when set, else
// the one `make runsc` built, else runsc on PATH; and asks it what it
// knows (`runsc flags`, and `runsc --version` for one airlock did not
// build). It takes about 10 ms.
func Find(ctx context.Context) (*Binary, error) {
	path := os.Getenv(Env)
	if path == "" {
		if _, err := os.Stat(Pinned); err == nil {
			path = Pinned
		} else if p, err := exec.LookPath("runsc"); err == nil {
			path = p
		} else {
			return nil, fmt.Errorf("%w (not at %s, not on PATH)", ErrNotFound, Pinned)
		}
	}
	return Inspect(ctx, path)
}

// Inspect asks the runsc at path what it is and knows.
func Inspect(ctx context.Context, path string) (*Binary, error) {
	r := &Binary{Path: path}
	if path == Pinned {
		// A module build says "VERSION_MISSING"; its path names it. What
		// it knows is known: asking would cost every `airlock run` a
		// 100 MB program's start (a test checks this against it).
		r.Version, r.Pinned = Version, true
		r.Platforms, r.flags = slices.Clone(pinnedPlatforms), slices.Clone(pinnedFlags)
		return r, nil
	}
	out, err := runTool(ctx, 5*time.Second, path, "--version")
	if err != nil {
		return nil, fmt.Errorf("runsc does not run: %w", err)
	}
	line, _, _ := strings.Cut(out, "\n")
	r.Version = strings.TrimPrefix(strings.TrimSpace(line), "runsc version ")
	out, err = runTool(ctx, 5*time.Second, path, "flags")
	if err != nil {
		// Not every build has the flags command; the platforms are then
		// found by trying them.
		return r, nil //nolint:nilerr // an old runsc still works
	}
	r.flags, r.Platforms = parseFlags(out)
	return r, nil
}

// parseFlags reads `runsc flags`: the flag names, and the platforms
// from the -platform flag's help ("specifies which platform to use:
// systrap (default), ptrace, kvm."), default first.
func parseFlags(out string) (flags, platforms []string) {
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
func (r *Binary) HasFlag(name string) bool { return slices.Contains(r.flags, name) }

// HasPlatform says whether this runsc knows platform p. When its platforms
// are unknown, only ptrace (every build has it) is assumed.
func (r *Binary) HasPlatform(p string) bool {
	if len(r.Platforms) == 0 {
		return p == "ptrace"
	}
	return slices.Contains(r.Platforms, p)
}

// DefaultPlatform is the platform airlock uses with this runsc: systrap
// when it has it (faster, the current default), else ptrace. KVM is never
// chosen by itself: on hosts whose /dev/kvm is not the real thing (nested,
// PVM) runsc hangs on it.
func (r *Binary) DefaultPlatform() string {
	if r.HasPlatform("systrap") {
		return "systrap"
	}
	return "ptrace"
}

// Describe says which runsc this is, for doctor and errors:
// "runsc v0.0.0-… (built by make runsc)", or
// "runsc 0.0~20221219.0 at /usr/bin/runsc (old: ptrace platform only)".
func (r *Binary) Describe() string {
	if r.Pinned {
		return "runsc " + r.Version + " (built by make runsc)"
	}
	s := "runsc " + r.Version + " at " + r.Path
	if !r.HasPlatform("systrap") {
		s += " (old: no systrap platform; build a current one with `make runsc`)"
	}
	return s
}

// runTool runs path with args and returns its output, trimmed.
func runTool(ctx context.Context, timeout time.Duration, path string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = "/"
	cmd.WaitDelay = 2 * time.Second
	out, err := cmd.CombinedOutput()
	s := strings.TrimSpace(string(out))
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w after %v", ctx.Err(), timeout)
		}
		last := s[strings.LastIndexByte(s, '\n')+1:]
		return s, fmt.Errorf("%s %s: %w: %s", path, strings.Join(args, " "), err, last)
	}
	return s, nil
}
