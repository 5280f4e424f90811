package sandboxtest

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

func fileEscapeCases() []testCase {
	return []testCase{
		{name: "dotdot", needs: []need{needFiles}, run: testDotDot},
		{name: "symlink_read", needs: []need{needFiles}, run: testSymlinkRead},
		{name: "symlink_write", needs: []need{needFiles}, run: testSymlinkWrite},
		{name: "remove_symlinked_dir", needs: []need{needFiles}, run: testRemoveSymlinkedDir},
	}
}

// insidePasswd is the sandbox's own /etc/passwd as a command reads it, and
// whether it has one. Every Linux userland has one; a sandbox without a
// shell may have none.
func (e *env) insidePasswd(t *testing.T) (string, bool) {
	t.Helper()
	if e.caps.Shell {
		return e.ok(t, e.w.ReadFiles("/etc/passwd")), true
	}
	o := e.run(t, e.w.ReadFiles("/etc/passwd"))
	return o.stdout, o.res.ExitCode == 0 && o.res.Reason == sandbox.ReasonExit
}

// symlinks makes each link (a path inside) point to its target, through
// the file API: the target is stored as given, as ln -s stores it.
func (e *env) symlinks(t *testing.T, links ...[2]string) {
	t.Helper()
	for _, l := range links {
		if err := e.sb.Files().Symlink(e.ctx, l[1], l[0]); err != nil {
			t.Fatalf("Symlink %s -> %s: %v", l[0], l[1], err)
		}
	}
}

// hostFile reads a host file for comparison; a missing one reads as "".
func hostFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read host %s: %v", p, err)
	}
	return string(b)
}

func testDotDot(t *testing.T, e *env) {
	hostPasswd := hostFile(t, "/etc/passwd")
	insidePasswd, has := e.insidePasswd(t)
	for _, p := range []string{
		"../../etc/passwd", "../../../../../../etc/passwd", "/workspace/../../../etc/passwd",
		"/../../etc/passwd", "..", "/workspace/..//..//etc/passwd",
	} {
		got, err := e.readFile(p)
		switch {
		case err != nil:
			if !isClass(err, sandbox.ErrOutside, sandbox.ErrInvalid, sandbox.ErrNotFound) {
				t.Errorf("ReadFile %q: %v; want a result resolved inside the sandbox or ErrOutside", p, err)
			}
		case got == hostPasswd && got != insidePasswd:
			t.Errorf("ReadFile %q returned the host's /etc/passwd", p)
		case !has:
			t.Errorf("ReadFile %q returned %q, though a command in the sandbox finds no /etc/passwd", p, clip(got))
		case got != insidePasswd:
			t.Errorf("ReadFile %q returned %q, which is neither an error nor the sandbox's own /etc/passwd", p, clip(got))
		}
	}
	for _, p := range []string{"../../etc/airlock-escape", "/workspace/../../tmp/../../airlock-escape"} {
		if err := e.sb.Files().WriteFile(e.ctx, p, strings.NewReader("escaped"), 0o644); err == nil {
			if _, herr := os.Stat(filepath.Join("/", filepath.Base(p))); herr == nil {
				t.Errorf("WriteFile %q wrote on the host", p)
			}
		}
	}
	for _, p := range []string{"/etc/airlock-escape", "/airlock-escape"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("host %s exists after WriteFile with \"..\"", p)
		}
	}
	if _, err := e.sb.Files().ReadDir(e.ctx, "../../../"); err != nil && !isClass(err, sandbox.ErrOutside, sandbox.ErrInvalid) {
		t.Errorf("ReadDir ../../../: %v", err)
	}
}

func testSymlinkRead(t *testing.T, e *env) {
	c := newHostCanary(t)
	hostShadow := hostFile(t, "/etc/shadow")
	e.symlinks(t,
		[2]string{"shadow", "/etc/shadow"},
		[2]string{"canary", c.path},
		[2]string{"canary-rel", "../../../../../../.." + c.path},
		[2]string{"canary-dir", c.dir},
		[2]string{"agent-environ", "/proc/1/environ"},
		[2]string{"agent-cmdline", "/proc/1/cmdline"},
		[2]string{"agent-status", "/proc/1/status"},
		[2]string{"self-environ", "/proc/self/environ"},
		[2]string{"self-status", "/proc/self/status"},
		[2]string{"self-root", "/proc/self/root/etc/passwd"},
		[2]string{"agent-root", "/proc/1/root/etc/passwd"},
		[2]string{"agent-mem", "/proc/1/mem"},
		[2]string{"loop2", "loop1"},
		[2]string{"loop1", "loop2"},
	)
	check := func(name, got string) {
		t.Helper()
		switch {
		case strings.Contains(got, c.content):
			t.Errorf("ReadFile %s returned the host canary", name)
		case hostShadow != "" && strings.Contains(got, hostShadow):
			t.Errorf("ReadFile %s returned the host's /etc/shadow", name)
		case strings.Contains(got, "airlock"):
			t.Errorf("ReadFile %s returned the agent's data: %s", name, clip(got))
		}
	}
	for _, name := range []string{"shadow", "canary", "canary-rel", "agent-environ", "agent-cmdline", "agent-status",
		"self-environ", "self-status", "self-root", "agent-root", "agent-mem", "loop1", "canary-dir/" + c.name} {
		got, err := e.readFile(name)
		if err == nil {
			check(name, got)
			if strings.HasPrefix(name, "agent-") && got != "" {
				t.Errorf("ReadFile %s (a link into the agent's /proc) returned %d bytes; the workload cannot read them, nor may the API", name, len(got))
			}
		}
	}
	if list, err := e.sb.Files().ReadDir(e.ctx, "canary-dir"); err == nil && slices.ContainsFunc(list, func(fi sandbox.FileInfo) bool { return fi.Name == c.name }) {
		t.Errorf("ReadDir through a symlink lists the host canary's directory")
	}
	if fi, err := e.sb.Files().Stat(e.ctx, "canary"); err != nil || fi.Type != "symlink" || fi.Target != c.path {
		t.Errorf("Stat of the link (not followed): %+v, %v", fi, err)
	}
}

func testSymlinkWrite(t *testing.T, e *env) {
	c := newHostCanary(t)
	watched := []string{"/etc/passwd", "/etc/shadow", "/etc/hostname", c.path}
	before := map[string][32]byte{}
	for _, p := range watched {
		before[p] = sha256.Sum256([]byte(hostFile(t, p)))
	}
	insidePasswd, _ := e.insidePasswd(t)
	newHost := filepath.Join(c.dir, "created-through-link")
	e.symlinks(t,
		[2]string{"passwd", "/etc/passwd"},
		[2]string{"canary", c.path},
		[2]string{"new-host-file", newHost},
		[2]string{"host-dir", c.dir},
		[2]string{"agent-root", "/proc/1/root/etc/passwd"},
	)
	for _, name := range []string{"passwd", "canary", "new-host-file", "host-dir/written", "agent-root"} {
		// Either refused, or written inside the sandbox: both are fine.
		_ = e.sb.Files().WriteFile(e.ctx, name, strings.NewReader("pwned\n"), 0o644)
	}
	for _, p := range watched {
		if sha256.Sum256([]byte(hostFile(t, p))) != before[p] {
			t.Errorf("host %s changed after WriteFile through a symlink", p)
		}
	}
	for _, p := range []string{newHost, filepath.Join(c.dir, "written")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("WriteFile through a symlink created host file %s", p)
		}
	}
	if got, _ := e.insidePasswd(t); got != insidePasswd {
		t.Errorf("the sandbox's read-only /etc/passwd changed through a symlink: %q", got)
	}
}

func testRemoveSymlinkedDir(t *testing.T, e *env) {
	c := newHostCanary(t)
	f := e.sb.Files()
	for _, d := range []string{"/workspace/keep/inner", "/workspace/victim/sub"} {
		if err := f.Mkdir(e.ctx, d, 0o755); err != nil {
			t.Fatalf("Mkdir %s: %v", d, err)
		}
	}
	e.writeFile(t, "/workspace/keep/inner/file", "kept\n", 0o644)
	e.writeFile(t, "/workspace/victim/sub/file", "gone\n", 0o644)
	e.writeFile(t, "/tmp/keepme", "tmpfile\n", 0o644)
	e.symlinks(t,
		[2]string{"/workspace/victim/link-to-keep", "/workspace/keep"},
		[2]string{"/workspace/victim/sub/rel-link", "../keep/inner"},
		[2]string{"/workspace/victim/link-to-etc", "/etc"},
		[2]string{"/workspace/victim/link-to-tmp", "/tmp"},
		[2]string{"/workspace/victim/link-to-host", c.dir},
	)
	passwd, hasPasswd := e.insidePasswd(t)
	if err := e.sb.Files().Remove(e.ctx, "/workspace/victim"); err != nil {
		t.Fatalf("Remove a directory holding symlinks: %v", err)
	}
	if _, err := e.sb.Files().Stat(e.ctx, "/workspace/victim"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("the directory still exists after Remove: %v", err)
	}
	if got := e.ok(t, e.w.ReadFiles("/workspace/keep/inner/file", "/tmp/keepme")); got != "kept\ntmpfile\n" {
		t.Errorf("Remove followed a symlink and deleted its target's contents: %q", got)
	}
	if got, has := e.insidePasswd(t); has != hasPasswd || got != passwd {
		t.Errorf("Remove followed a symlink into /etc: /etc/passwd was %q (present: %v), is now %q (present: %v)", clip(passwd), hasPasswd, clip(got), has)
	}
	if got := hostFile(t, c.path); got != c.content+"\n" {
		t.Errorf("the host canary changed after Remove: %q", got)
	}
	// Removing a symlink to a directory removes the link only.
	e.symlinks(t, [2]string{"/workspace/lonely-link", "/workspace/keep"})
	if err := e.sb.Files().Remove(e.ctx, "lonely-link"); err != nil {
		t.Errorf("Remove of a symlink: %v", err)
	}
	if got := e.ok(t, e.w.ReadFiles("/workspace/keep/inner/file")); got != "kept\n" {
		t.Errorf("after removing a link to a directory, its target holds: %q", got)
	}
	if got := e.ok(t, e.w.ListDir("/workspace")); slices.Contains(strings.Split(got, "\n"), "lonely-link") {
		t.Errorf("after removing a link to a directory, the link is still there: %q", got)
	}
	if !bytes.Equal([]byte(hostFile(t, c.path)), []byte(c.content+"\n")) {
		t.Errorf("the host canary changed")
	}
}
