package hostcap

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runsc"
)

// RunTool runs a program under its own timeout and returns its combined
// output, trimmed. A failure includes the output.
func RunTool(ctx context.Context, timeout time.Duration, path string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = "/"
	// Children that keep the output pipe open must not hold us past the timeout.
	cmd.WaitDelay = 2 * time.Second
	out, err := cmd.CombinedOutput()
	s := strings.TrimSpace(string(out))
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w after %v", ctx.Err(), timeout)
		}
		if s != "" {
			return s, fmt.Errorf("%s %s: %w: %s", path, strings.Join(args, " "), err, LastLine(s))
		}
		return s, fmt.Errorf("%s %s: %w", path, strings.Join(args, " "), err)
	}
	return s, nil
}

// FirstLine returns the first line of s.
func FirstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}

// LastLine returns the last non-empty line of s, usually the error.
func LastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return strings.TrimSpace(s[i+1:])
	}
	return s
}

// runscFix installs runsc.
const runscFix = "apt-get install runsc (Debian's build is old: ptrace platform only), " +
	"or build a current one with `make runsc`"

// runscTimeout bounds one `runsc do` attempt.
const runscTimeout = 20 * time.Second

// probeRunsc runs `runsc do true` with no network with the runsc airlock
// uses (runsc.Find), on the systrap platform when this runsc knows it, else
// on ptrace.
func probeRunsc(ctx context.Context) Result {
	r, err := runsc.Find(ctx)
	if errors.Is(err, runsc.ErrNotFound) {
		return fail(fmt.Sprintf("runsc is not installed (not at %s, not found on PATH)", runsc.Pinned), runscFix)
	}
	if err != nil {
		return fail(err.Error(), runscFix)
	}
	var failures []string
	for _, platform := range []string{"systrap", "ptrace"} {
		if len(r.Platforms) > 0 && !r.HasPlatform(platform) {
			failures = append(failures, platform+": unknown to this build")
			continue
		}
		args := []string{"--network=none", "--platform=" + platform}
		if !isRoot() {
			args = append(args, "--rootless")
		}
		args = append(args, "do", "true")
		out, err := RunTool(ctx, runscTimeout, r.Path, args...)
		if err == nil {
			detail := fmt.Sprintf("runsc %s, platform %s", r.Version, platform)
			if len(failures) > 0 {
				detail += " (" + strings.Join(failures, "; ") + ")"
			}
			switch {
			case r.Pinned:
				detail += ", built by make runsc"
			case platform != "systrap":
				detail += "; an old build without systrap: build a current one with `make runsc`"
			}
			return ok(detail)
		}
		if strings.Contains(out, "unknown platform") {
			failures = append(failures, platform+": unknown to this build")
			continue
		}
		failures = append(failures, fmt.Sprintf("%s: %v", platform, err))
		if ctx.Err() != nil {
			break
		}
	}
	why := fmt.Sprintf("runsc %s cannot run a sandbox: %s", r.Version, strings.Join(failures, "; "))
	if !isRoot() {
		return fail(why+notRoot(), rootFix+", or "+runscFix)
	}
	return fail(why, runscFix)
}

// qemuBinary names the system emulator for this machine's architecture.
func qemuBinary() (bin, pkg string) {
	switch runtime.GOARCH {
	case "arm64":
		return "qemu-system-aarch64", "qemu-system-arm"
	default:
		return "qemu-system-x86_64", "qemu-system-x86"
	}
}

// probeQEMU finds the system emulator and asks for its version.
func probeQEMU(ctx context.Context) Result {
	bin, pkg := qemuBinary()
	fix := "apt-get install " + pkg
	path, err := exec.LookPath(bin)
	if err != nil {
		return fail(bin+" is not installed (not found on PATH)", fix)
	}
	out, err := RunTool(ctx, 5*time.Second, path, "--version")
	if err != nil {
		return fail(fmt.Sprintf("%s does not run: %v", bin, err), fix)
	}
	version := bin + " " + strings.TrimPrefix(FirstLine(out), "QEMU emulator version ")
	if bin == "qemu-system-x86_64" {
		if err := startMicroVM(ctx, path); err != nil {
			return fail(fmt.Sprintf("%s cannot make a microvm machine: %v", version, err), fix)
		}
	}
	return ok(version)
}

// startMicroVM makes a microvm machine (emulated, stopped before its first
// instruction: no guest needed) and quits it over QMP.
func startMicroVM(ctx context.Context, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "-machine", "microvm", "-accel", "tcg", "-nodefaults", "-no-user-config",
		"-display", "none", "-S", "-qmp", "stdio")
	cmd.Dir = "/"
	cmd.Stdin = strings.NewReader(`{"execute":"qmp_capabilities"}` + "\n" + `{"execute":"quit"}` + "\n")
	cmd.WaitDelay = 2 * time.Second
	out, err := cmd.CombinedOutput()
	s := strings.TrimSpace(string(out))
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("no answer within 10 s")
	case err != nil:
		return fmt.Errorf("%w: %s", err, LastLine(s))
	case !strings.Contains(s, `"QMP"`) || !strings.Contains(s, `"return"`):
		return fmt.Errorf("no QMP answer: %s", LastLine(s))
	}
	return nil
}

// probeBwrap asks bubblewrap for its version and runs true in a sandbox
// that unshares every namespace.
func probeBwrap(ctx context.Context) Result {
	const fix = "apt-get install bubblewrap"
	path, err := exec.LookPath("bwrap")
	if err != nil {
		return fail("bwrap is not installed (not found on PATH)", fix)
	}
	out, err := RunTool(ctx, 5*time.Second, path, "--version")
	if err != nil {
		return fail(fmt.Sprintf("bwrap does not run: %v", err), fix)
	}
	version := FirstLine(out)
	if _, err := RunTool(ctx, 10*time.Second, path,
		"--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"); err != nil {
		why := fmt.Sprintf("%s cannot start a sandbox: %v", version, err)
		if !isRoot() {
			return fail(why+notRoot(), rootFix+", or enable unprivileged user namespaces (see userns)")
		}
		return fail(why, "see the userns capability")
	}
	return ok(version)
}
