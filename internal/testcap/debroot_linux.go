package testcap

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"time"

	"github.com/airlock-sandbox/airlock/internal/hostcap"
)

// DebianMirror is where the Debian roots of the package tests come from.
const DebianMirror = "http://deb.debian.org/debian"

// probeDebroot checks what the Debian package's install test needs:
// dpkg-deb to build the package, debootstrap and a reachable mirror to
// make a fresh Debian 12 root, and systemd-analyze (systemd need not be
// PID 1) to check the unit.
func probeDebroot(ctx context.Context) Result {
	const fix = "apt-get install debootstrap systemd (systemd-analyze), and let this host reach " + DebianMirror
	var versions []string
	for _, tool := range [][]string{{"dpkg-deb", "--version"}, {"debootstrap", "--version"}, {"systemd-analyze", "--version"}} {
		path, err := exec.LookPath(tool[0])
		if err != nil {
			return fail(tool[0]+" is not installed (not found on PATH)", fix)
		}
		out, err := hostcap.RunTool(ctx, 5*time.Second, path, tool[1:]...)
		if err != nil {
			return fail(tool[0]+" does not run: "+err.Error(), fix)
		}
		versions = append(versions, hostcap.FirstLine(out))
	}
	url := DebianMirror + "/dists/bookworm/InRelease"
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, url, nil)
	if err != nil {
		return fail(err.Error(), fix)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fail("the Debian mirror does not answer: "+err.Error(), fix)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fail(fmt.Sprintf("the Debian mirror answers %s for %s", resp.Status, url), fix)
	}
	return ok(fmt.Sprintf("%s; %s; %s; %s reachable", versions[0], versions[1], versions[2], DebianMirror))
}
