package testcap

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/hostcap"
)

// jupyterPython is the Python whose Jupyter kernel sandboxes run: a
// composed root shows the host's /usr, so it is /usr/bin/python3, not
// whatever python3 comes first on the daemon's PATH.
var jupyterPython = "/usr/bin/python3"

// jupyterProbe starts a kernel with jupyter_client, has it evaluate 1+1 and
// prints the versions; anything else fails.
const jupyterProbe = `
import os, sys, jupyter_client, ipykernel
from jupyter_client.manager import start_new_kernel
km, kc = start_new_kernel(kernel_name="python3")
try:
    reply = kc.execute_interactive("1+1", timeout=30, output_hook=lambda m: m["msg_type"] == "execute_result" and print("result", m["content"]["data"]["text/plain"]))
    assert reply["content"]["status"] == "ok", reply["content"]
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
print("ipykernel", ipykernel.__version__, "jupyter_client", jupyter_client.__version__)
sys.stdout.flush()
os._exit(0)  # jupyter_client's finalizers are noisy at exit
`

// probeJupyter checks that the code interpreter's kernel runs: Debian's
// python3-ipykernel and python3-jupyter-client start a kernel that answers
// 1+1 with 2.
func probeJupyter(ctx context.Context) Result {
	const fix = "apt-get install python3-ipykernel python3-jupyter-client python3-matplotlib (make deps)"
	if _, err := exec.LookPath(jupyterPython); err != nil {
		return fail(jupyterPython+" is not installed", fix)
	}
	dir, err := os.MkdirTemp("", "airlock-jupyter-probe-")
	if err != nil {
		return fail("make a scratch directory: "+err.Error(), fix)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, jupyterPython, "-c", jupyterProbe)
	// The kernel's files go to the scratch directory, not to $HOME.
	cmd.Env = append(os.Environ(), "JUPYTER_RUNTIME_DIR="+dir, "JUPYTER_DATA_DIR="+dir, "IPYTHONDIR="+dir+"/ipython", "PYDEVD_DISABLE_FILE_VALIDATION=1")
	cmd.Dir = dir
	cmd.WaitDelay = 2 * time.Second
	out, err := cmd.CombinedOutput()
	s := strings.TrimSpace(string(out))
	switch {
	case err != nil:
		return fail("a Jupyter kernel did not start and evaluate 1+1: "+err.Error()+": "+hostcap.LastLine(s), fix)
	case !strings.Contains(s, "result 2"):
		return fail("a Jupyter kernel did not answer 1+1 with 2: "+hostcap.LastLine(s), fix)
	}
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "ipykernel ") {
			return ok(strings.TrimSpace(l))
		}
	}
	return ok(hostcap.LastLine(s))
}
