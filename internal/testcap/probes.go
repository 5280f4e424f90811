package testcap

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/airlock-sandbox/airlock/internal/hostcap"
)

// rigNames are the capabilities only tests need: the tools and test rigs
// their probes look for. airlock itself, and so `airlock doctor`, knows
// none of them (the docker driver's own Probe says whether Docker works).
var rigNames = []string{
	"docker",     // a Docker engine that runs a container (the tests start dockerd where it is installed)
	"node",       // Node.js and npm, for the tests that drive airlock from npm clients
	"chromium",   // a headless browser, for the test of the approval page
	"debroot",    // debootstrap, a Debian mirror, dpkg-deb and systemd-analyze, for the Debian package's install test
	"kubernetes", // the one-node cluster of the tests (internal/testrig/kube), built by make kube-rig
	"wasm",       // the wasm driver with python.wasm (make wasm-python)
	"jupyter",    // a Jupyter kernel (python3-ipykernel, jupyter_client) that evaluates 1+1, for the E2B code interpreter
	"s3",         // an S3-compatible server for the object store's tests (internal/s3server), built by make s3-rig
	"registry",   // the reference container registry (Debian's docker-registry), for the image tests (internal/registry)
}

// Names lists every capability a test may require, in a stable order: the
// host's layers (hostcap.Names), then the test rigs'. These are the names
// AIRLOCK_TEST_REQUIRE accepts.
var Names = append(slices.Clone(hostcap.Names), rigNames...)

// Known says whether name is one of Names.
func Known(name string) bool {
	return slices.Contains(Names, name)
}

// rigProbe checks one test rig. It returns a Result without Name; Probe
// fills it in.
type rigProbe struct {
	run     func(ctx context.Context) hostcap.Result
	timeout time.Duration
}

// defaultRigTimeout bounds a rig probe that sets no timeout of its own.
const defaultRigTimeout = 10 * time.Second

// Probe checks the named capability: a host layer with hostcap.Probe, a
// test rig with its own probe, within ctx and the probe's timeout. An
// unknown name gives a Result that is not OK.
func Probe(ctx context.Context, name string) hostcap.Result {
	if hostcap.Known(name) {
		return hostcap.Probe(ctx, name)
	}
	p, ok := rigs[name]
	if !ok {
		return hostcap.Result{Name: name, Why: fmt.Sprintf("unknown capability %q (known: %v)", name, Names)}
	}
	timeout := p.timeout
	if timeout == 0 {
		timeout = defaultRigTimeout
	}
	return hostcap.Run(ctx, name, timeout, p.run)
}
