package sandboxtest

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// testHome checks Spec.Home: /home/user is /workspace under a second
// name (one tmpfs: the same files, size and owner), the default working
// directory, HOME, USER and PWD, and the base of the file API's relative
// paths.
func testHome(t *testing.T, e *env) {
	f := e.sb.Files()
	if got := e.shOK(t, `echo "$HOME $USER $PWD"; pwd; stat -c '%u:%g %a' /home/user`); got != "/home/user user /home/user\n/home/user\n1000:1000 755\n" {
		t.Errorf("a command's home, user, working directory and its owner: %q, want /home/user, user, /home/user, 1000:1000 755", got)
	}
	if err := f.Mkdir(e.ctx, "/home/user/data", 0o755); err != nil {
		t.Fatalf("Mkdir /home/user/data: %v", err)
	}
	e.writeFile(t, "/home/user/data/x", "written at /home/user", 0o644)
	if got, err := e.readFile("/workspace/data/x"); err != nil || got != "written at /home/user" {
		t.Errorf("ReadFile /workspace/data/x after a write to /home/user/data/x: %q, %v", got, err)
	}
	if got := e.shOK(t, "cat /workspace/data/x; echo; echo from-a-command > /workspace/data/y; cat data/y"); got != "written at /home/user\nfrom-a-command\n" {
		t.Errorf("a command sees %q, want the same files under both names", got)
	}
	if got, err := e.readFile("data/y"); err != nil || got != "from-a-command\n" {
		t.Errorf("ReadFile data/y (relative, so in the home): %q, %v", got, err)
	}
	if fi, err := f.Stat(e.ctx, "data/y"); err != nil || fi.Path != "/home/user/data/y" {
		t.Errorf("Stat data/y: %+v, %v, want the path /home/user/data/y", fi, err)
	}
	// One tmpfs: its size (the workspace's quota) and use are the same
	// under both names, and a file past the quota fails under either.
	sizes := strings.Split(strings.TrimSpace(e.shOK(t, `stat -f -c '%b %f' /home/user /workspace`)), "\n")
	if len(sizes) != 2 || sizes[0] != sizes[1] {
		t.Errorf("the file systems of /home/user and /workspace: %q, want one", sizes)
	}
	if out := e.sh(t, "dd if=/dev/zero of=/home/user/big bs=1M count=64 2>&1; echo rc=$?"); !strings.Contains(out.stdout, "No space left") {
		t.Errorf("64 MiB written at /home/user with a %d MiB workspace: %q, want the quota to hold", e.spec.Limits.DiskBytes>>20, out.stdout)
	}
	e.shOK(t, "rm -f /home/user/big")
	// No one else's: the home holds nothing but the workspace's files, and
	// the tree above it cannot be written.
	if out := e.sh(t, "touch /home/other 2>&1; echo rc=$?"); !strings.Contains(out.stdout, "rc=1") {
		t.Errorf("touch /home/other: %q, want a failure (only the home is writable)", out.stdout)
	}
}

// homeSpec gives the case's sandbox E2B's home.
func homeSpec(_ *testing.T, s *sandbox.Spec) { s.Home = sandbox.E2BHome }
