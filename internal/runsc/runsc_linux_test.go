package runsc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Excerpts of `runsc flags` of the two builds airlock meets.
const (
	flagsCurrent = `  -EXPERIMENTAL-afxdp
    	EXPERIMENTAL. Use an AF_XDP socket to receive packets.
  -in-sandbox-cgroup value
    	cgroup setup to use inside the sandbox: v1 (default), v2.
  -overlay2 value
    	wrap mounts with overlayfs. Format is
    	* 'none' to turn overlay mode off
  -platform string
    	specifies which platform to use: systrap (default), ptrace, kvm. (default "systrap")
  -platform_device_path string
    	path to a platform-specific device file (e.g. /dev/kvm for KVM platform).
`
	flagsDebian2022 = `  -overlay
    	wrap filesystem mounts with writable overlay.
  -platform string
    	specifies which platform to use: ptrace (default), kvm. (default "ptrace")
`
)

func TestParseRunscFlags(t *testing.T) {
	tests := []struct {
		name          string
		out           string
		wantPlatforms []string
		wantFlags     []string
		notFlags      []string
		wantDefault   string
	}{
		{
			name: "current", out: flagsCurrent,
			wantPlatforms: []string{"systrap", "ptrace", "kvm"},
			wantFlags:     []string{"in-sandbox-cgroup", "overlay2", "platform", "platform_device_path", "EXPERIMENTAL-afxdp"},
			notFlags:      []string{"overlay", "ptrace", "none"},
			wantDefault:   "systrap",
		},
		{
			name: "debian 2022", out: flagsDebian2022,
			wantPlatforms: []string{"ptrace", "kvm"},
			wantFlags:     []string{"overlay", "platform"},
			notFlags:      []string{"in-sandbox-cgroup", "overlay2"},
			wantDefault:   "ptrace",
		},
		{
			name: "kvm default", out: "  -platform string\n    \tspecifies which platform to use: kvm (default), systrap, ptrace.\n",
			wantPlatforms: []string{"kvm", "systrap", "ptrace"}, wantFlags: []string{"platform"},
			wantDefault: "systrap", // never kvm by itself
		},
		{
			name: "nothing", out: "",
			wantDefault: "ptrace",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			flags, platforms := parseFlags(tt.out)
			if !slices.Equal(platforms, tt.wantPlatforms) {
				t.Errorf("platforms %q, want %q", platforms, tt.wantPlatforms)
			}
			r := &Binary{Platforms: platforms, flags: flags}
			for _, f := range tt.wantFlags {
				if !r.HasFlag(f) {
					t.Errorf("flag %s not found in %q", f, flags)
				}
			}
			for _, f := range tt.notFlags {
				if r.HasFlag(f) {
					t.Errorf("flag %s found in %q", f, flags)
				}
			}
			if got := r.DefaultPlatform(); got != tt.wantDefault {
				t.Errorf("DefaultPlatform() = %s, want %s", got, tt.wantDefault)
			}
		})
	}
}

// fakeRunsc writes a shell script that answers --version and flags.
func fakeRunsc(t *testing.T, path, version, flags string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	flagsFile := path + ".flags"
	if err := os.WriteFile(flagsFile, []byte(flags), 0o644); err != nil {
		t.Fatal(err)
	}
	// Shell built-ins only: the tests empty PATH.
	script := "#!/bin/sh\ncase \"$1\" in --version) echo \"runsc version " + version + "\"; echo 'spec: 1.0.2';; " +
		"flags) while IFS= read -r l; do echo \"$l\"; done < '" + flagsFile + "' >&2;; *) exit 1;; esac\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestFind(t *testing.T) {
	dir := t.TempDir()
	onPath := filepath.Join(dir, "path", "runsc")
	fakeRunsc(t, onPath, "0.0~20221219.0", flagsDebian2022)
	pinned := filepath.Join(dir, "pinned", "runsc-"+Version)
	other := filepath.Join(dir, "other", "runsc")
	fakeRunsc(t, other, "custom-1", flagsCurrent)

	orig := Pinned
	t.Cleanup(func() { Pinned = orig })
	Pinned = pinned
	t.Setenv("PATH", filepath.Dir(onPath))
	t.Setenv(Env, "")
	ctx := context.Background()

	t.Run("path when nothing was built", func(t *testing.T) {
		r, err := Find(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Path != onPath || r.Pinned || r.Version != "0.0~20221219.0" || r.DefaultPlatform() != "ptrace" {
			t.Errorf("Find = %+v, want Debian's on PATH, ptrace", r)
		}
		if d := r.Describe(); !strings.Contains(d, "old") || !strings.Contains(d, "make runsc") {
			t.Errorf("Describe() = %q, want it to say it is old and how to get a current one", d)
		}
	})
	fakeRunsc(t, pinned, "VERSION_MISSING", flagsCurrent)
	t.Run("pinned first", func(t *testing.T) {
		r, err := Find(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Path != pinned || !r.Pinned || r.Version != Version || r.DefaultPlatform() != "systrap" || !r.HasFlag("in-sandbox-cgroup") {
			t.Errorf("Find = %+v, want the pinned build, systrap", r)
		}
		if d := r.Describe(); !strings.Contains(d, Version) || !strings.Contains(d, "make runsc") {
			t.Errorf("Describe() = %q", d)
		}
	})
	t.Run("environment overrides", func(t *testing.T) {
		t.Setenv(Env, other)
		r, err := Find(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Path != other || r.Pinned || r.Version != "custom-1" {
			t.Errorf("Find = %+v, want %s", r, other)
		}
	})
	t.Run("none", func(t *testing.T) {
		Pinned = filepath.Join(dir, "nowhere")
		t.Setenv("PATH", filepath.Join(dir, "empty"))
		_, err := Find(ctx)
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("Find without any runsc: %v, want ErrNotFound", err)
		}
	})
}

// TestVersionMatchesMakefile: `make runsc` builds the version that
// airlock looks for.
func TestVersionMatchesMakefile(t *testing.T) {
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	var version, dir string
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "RUNSC_VERSION :="); ok {
			version = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "RUNSC_DIR     :="); ok {
			dir = strings.TrimSpace(v)
		}
	}
	if version != Version || dir != Dir {
		t.Errorf("the Makefile builds runsc %q into %q; airlock looks for %q in %q", version, dir, Version, Dir)
	}
}

// TestPinnedRunscKnown: what airlock assumes the pinned build knows, it
// really knows.
func TestPinnedRunscKnown(t *testing.T) {
	if _, err := os.Stat(PinnedPath()); err != nil {
		skipOrFail(t, "the pinned runsc is not built here (make runsc): %v", err)
	}
	out, err := runTool(context.Background(), 10*time.Second, PinnedPath(), "flags")
	if err != nil {
		t.Fatalf("runsc flags: %v", err)
	}
	flags, platforms := parseFlags(out)
	if !slices.Equal(platforms, pinnedPlatforms) {
		t.Errorf("the pinned runsc has platforms %q; airlock assumes %q", platforms, pinnedPlatforms)
	}
	for _, f := range pinnedFlags {
		if !slices.Contains(flags, f) {
			t.Errorf("the pinned runsc has no flag -%s; airlock assumes it has", f)
		}
	}
}

// skipOrFail skips, unless AIRLOCK_TEST_REQUIRE names runsc (testcap would
// import this package through hostcap).
func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	for _, n := range strings.Split(os.Getenv("AIRLOCK_TEST_REQUIRE"), ",") {
		if strings.TrimSpace(n) == "runsc" {
			t.Fatalf("AIRLOCK_TEST_REQUIRE names runsc: "+format, args...)
		}
	}
	t.Skipf(format, args...)
}
