package microvm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// KernelMeta is the Debian metapackage whose dependency is the guest
// kernel: the cloud flavour, which boots fast and has the virtio drivers
// as modules. Its versioned package is fetched (never installed as the
// host's kernel), unpacked and cached by version.
const KernelMeta = "linux-image-cloud-amd64"

// kernel is an unpacked Debian kernel package in the cache.
type kernel struct {
	// Package is the versioned package ("linux-image-6.1.0-56-cloud-amd64"),
	// Version its Debian version ("6.1.192-2"), Release the kernel's
	// release ("6.1.0-56-cloud-amd64").
	Package string `json:"package"`
	Version string `json:"version"`
	Release string `json:"release"`
	// Dir is where it is unpacked.
	Dir string `json:"-"`
}

// Vmlinuz is the kernel image.
func (k *kernel) Vmlinuz() string { return filepath.Join(k.Dir, "boot", "vmlinuz-"+k.Release) }

// ModulesDir is the kernel's lib/modules/RELEASE.
func (k *kernel) ModulesDir() string { return filepath.Join(k.Dir, "lib", "modules", k.Release) }

// kernelCurrent names the kernel Prepare fetched last: the one the driver
// boots.
const kernelCurrent = "current"

// missingKernel says that no guest kernel has been fetched yet, and how.
func missingKernel(why string) error {
	return &sandbox.UnsupportedError{
		What: "microvm",
		Why:  "no guest kernel in the cache (" + why + ")",
		Fix:  "fetch it once: `airlock microvm prepare` (or `make microvm-assets`); it downloads " + KernelMeta + "'s kernel with apt-get, unpacks it into the cache and installs nothing",
	}
}

// currentKernel returns the kernel Prepare fetched last.
func currentKernel(cache string) (*kernel, error) {
	dir := filepath.Join(cache, "kernel")
	b, err := os.ReadFile(filepath.Join(dir, kernelCurrent))
	if errors.Is(err, os.ErrNotExist) {
		return nil, missingKernel(filepath.Join(dir, kernelCurrent) + " does not exist")
	}
	if err != nil {
		return nil, fmt.Errorf("read the guest kernel's record: %w", err)
	}
	name := strings.TrimSpace(string(b))
	if name == "" || strings.ContainsAny(name, "/\x00") {
		return nil, missingKernel(fmt.Sprintf("%s names %q", filepath.Join(dir, kernelCurrent), name))
	}
	return readKernel(filepath.Join(dir, name))
}

// readKernel reads the record of the kernel unpacked in dir.
func readKernel(dir string) (*kernel, error) {
	b, err := os.ReadFile(filepath.Join(dir, "kernel.json"))
	if err != nil {
		return nil, missingKernel(fmt.Sprintf("read %s: %v", filepath.Join(dir, "kernel.json"), err))
	}
	k := &kernel{Dir: dir}
	if err := json.Unmarshal(b, k); err != nil || k.Release == "" {
		return nil, missingKernel(fmt.Sprintf("%s is damaged", filepath.Join(dir, "kernel.json")))
	}
	if _, err := os.Stat(k.Vmlinuz()); err != nil {
		return nil, missingKernel(fmt.Sprintf("%s is missing", k.Vmlinuz()))
	}
	return k, nil
}

// fetchKernel finds the kernel package KernelMeta depends on now
// (apt-cache depends), and unless the cache has it, downloads it
// (apt-get download), unpacks it (dpkg -x) and records it; then it makes
// it the current one. It needs apt's package lists (apt-get update) and
// its repositories.
func fetchKernel(ctx context.Context, cache string, progress func(string, ...any)) (*kernel, error) {
	pkg, err := kernelPackage(ctx)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "airlock-kernel-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	// apt drops to its own user to download; it must be able to write here.
	if err := os.Chmod(tmp, 0o777); err != nil {
		return nil, err
	}
	version, err := tool(ctx, tmp, "apt-cache", "show", "--no-all-versions", pkg)
	if err != nil {
		return nil, err
	}
	ver := field(version, "Version")
	if ver == "" {
		return nil, fmt.Errorf("apt-cache show %s names no version", pkg)
	}
	dir := filepath.Join(cache, "kernel")
	name := pkg + "_" + strings.ReplaceAll(ver, ":", "%3a")
	if _, err := os.Stat(filepath.Join(dir, name, "kernel.json")); err != nil {
		progress("downloading %s %s", pkg, ver)
		_, err := cached(ctx, dir, name, func(out string) error {
			if _, err := tool(ctx, tmp, "apt-get", "download", "-q", pkg+"="+ver); err != nil {
				return err
			}
			debs, _ := filepath.Glob(filepath.Join(tmp, pkg+"_*.deb"))
			if len(debs) != 1 {
				return fmt.Errorf("apt-get download %s left %d packages", pkg, len(debs))
			}
			if _, err := tool(ctx, tmp, "dpkg", "-x", debs[0], out); err != nil {
				return err
			}
			rels, _ := filepath.Glob(filepath.Join(out, "lib", "modules", "*"))
			if len(rels) != 1 {
				return fmt.Errorf("%s holds %d kernel releases, want 1", filepath.Base(debs[0]), len(rels))
			}
			k := kernel{Package: pkg, Version: ver, Release: filepath.Base(rels[0])}
			b, _ := json.MarshalIndent(k, "", "  ")
			return os.WriteFile(filepath.Join(out, "kernel.json"), b, 0o644)
		})
		if err != nil {
			return nil, fmt.Errorf("fetch the guest kernel %s: %w", pkg, err)
		}
	}
	k, err := readKernel(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	cur := filepath.Join(dir, kernelCurrent)
	if err := os.WriteFile(cur+".tmp", []byte(name+"\n"), 0o644); err != nil {
		return nil, err
	}
	if err := os.Rename(cur+".tmp", cur); err != nil {
		return nil, err
	}
	return k, nil
}

// kernelPackage resolves KernelMeta to the versioned package it depends on.
func kernelPackage(ctx context.Context) (string, error) {
	out, err := tool(ctx, "/", "apt-cache", "depends", KernelMeta)
	if err != nil || !strings.Contains(out, "Depends:") {
		// A host whose package lists were never fetched (or were cleaned,
		// as in many images) knows no packages: fetch them once.
		if _, uerr := tool(ctx, "/", "apt-get", "update", "-qq"); uerr == nil {
			out, err = tool(ctx, "/", "apt-cache", "depends", KernelMeta)
		}
	}
	if err != nil {
		return "", fmt.Errorf("%w (run apt-get update first)", err)
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		dep, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "Depends:")
		dep = strings.TrimSpace(dep)
		if ok && strings.HasPrefix(dep, "linux-image-") {
			return dep, nil
		}
	}
	return "", fmt.Errorf("apt-cache depends %s names no linux-image package (run apt-get update first): %s", KernelMeta, strings.TrimSpace(out))
}

// field returns the value of key in an RFC 822 style record.
func field(record, key string) string {
	for _, line := range strings.Split(record, "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// tool runs a host tool in dir and returns its standard output; its error
// says what it printed.
func tool(ctx context.Context, dir, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C", "DEBIAN_FRONTEND=noninteractive"}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 2000 {
			msg = msg[len(msg)-2000:]
		}
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, msg)
	}
	return string(out), nil
}
