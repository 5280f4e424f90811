package testcap

import (
	"context"
	"os"
	"time"

	"github.com/airlock-sandbox/airlock/internal/hostcap"
	"github.com/airlock-sandbox/airlock/internal/registry"
)

// probeRegistry checks that the reference container registry of the image
// tests (Debian's docker-registry) is installed and serves the registry
// API on a loopback port with a configuration of the probe's own.
func probeRegistry(ctx context.Context) Result {
	out, err := hostcap.RunTool(ctx, 5*time.Second, registry.Bin, "--version")
	if err != nil {
		return fail("the registry does not run: "+err.Error(), registry.Fix)
	}
	dir, err := os.MkdirTemp("", "airlock-registryprobe-")
	if err != nil {
		return fail("make a directory for the probe's registry: "+err.Error(), "free space in the temporary directory")
	}
	defer os.RemoveAll(dir)
	r, err := registry.Run(ctx, dir)
	if err != nil {
		return fail("the registry does not start: "+err.Error(), registry.Fix)
	}
	r.Stop()
	return ok(hostcap.FirstLine(out))
}
