package testcap

import (
	"context"
	"os/exec"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/hostcap"
)

// probeChromium renders a page in headless Chromium: the test of the
// daemon's approval page drives it.
func probeChromium(ctx context.Context) Result {
	const fix = "apt-get install chromium"
	bin, err := exec.LookPath("chromium")
	if err != nil {
		return fail("chromium is not installed (not found on PATH)", fix)
	}
	out, err := hostcap.RunTool(ctx, 25*time.Second, bin, "--headless", "--no-sandbox", "--disable-gpu",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--dump-dom", "data:text/html,<p>airlock-probe</p>")
	if err != nil {
		return fail("chromium does not render a page: "+err.Error(), fix)
	}
	if !strings.Contains(out, "airlock-probe") {
		return fail("chromium rendered no page", fix)
	}
	v, _ := hostcap.RunTool(ctx, 10*time.Second, bin, "--version")
	return ok(hostcap.FirstLine(v))
}
