package sandboxtest

import (
	"slices"
	"strings"
	"testing"
)

// devAllowed is everything a sandbox's /dev may hold: the null, zero, full
// and random devices, a tmpfs /dev/shm, the fd links, and a terminal's
// devices (pts, ptmx, tty) for commands on a PTY; /dev/core is a link to
// /proc/kcore, which is masked.
var devAllowed = []string{
	"core", "fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout", "tty", "urandom", "zero",
}

// testDev: /dev holds only what a command needs (no fuse, no tun, no block
// devices, no kernel interfaces), on every driver.
func testDev(t *testing.T, e *env) {
	out := e.shOK(t, `for f in /dev/* /dev/.[!.]*; do [ -e "$f" ] || [ -L "$f" ] || continue; echo "${f#/dev/}"; done`)
	for _, name := range strings.Fields(out) {
		if !slices.Contains(devAllowed, name) {
			t.Errorf("/dev/%s exists in the sandbox; only %v may", name, devAllowed)
		}
	}
	// The devices that are there are the harmless ones, by number (stat
	// prints them in hex; these are all below 10).
	for dev, want := range map[string]string{"null": "1,3", "zero": "1,5", "full": "1,7", "random": "1,8", "urandom": "1,9"} {
		if got := strings.TrimSpace(e.shOK(t, "stat -c '%t,%T' /dev/"+dev)); got != want {
			t.Errorf("/dev/%s is device %s, want %s", dev, got, want)
		}
	}
}
