package testcap

import (
	"fmt"
	"os"
	"time"

	"github.com/airlock-sandbox/airlock/internal/hostcap"
)

// rigs maps each of rigNames to its probe.
var rigs = map[string]rigProbe{
	"docker":   {run: probeDocker, timeout: 30 * time.Second},
	"node":     {run: probeNode, timeout: 15 * time.Second},
	"chromium": {run: probeChromium, timeout: 30 * time.Second},
	"debroot":  {run: probeDebroot, timeout: 20 * time.Second},
	"jupyter":  {run: probeJupyter, timeout: 50 * time.Second},
	// Four 100 MB programs start once, cold.
	"kubernetes": {run: probeKubernetes, timeout: 60 * time.Second},
	"wasm":       {run: probeWasm, timeout: 60 * time.Second},
	"s3":         {run: probeS3, timeout: 40 * time.Second},
	"registry":   {run: probeRegistry, timeout: 30 * time.Second},
}

// Result is hostcap's: a test rig's probe answers as a host layer's does.
type Result = hostcap.Result

// ok is a working capability.
func ok(detail string) Result { return Result{OK: true, Detail: detail} }

// fail is a missing capability: why it is missing and how to get it.
func fail(why, fix string) Result { return Result{Why: why, Fix: fix} }

// isRoot says whether this process runs with effective uid 0.
func isRoot() bool { return os.Geteuid() == 0 }

// notRoot is appended to a Why when a step failed that needs root and the
// process is not root.
func notRoot() string {
	if isRoot() {
		return ""
	}
	return fmt.Sprintf(" (needs root; running as uid %d)", os.Geteuid())
}

// rootFix is the fix for a step that needs root.
const rootFix = "run the tests as root (sudo)"
