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
		{name: "dotdot", run: testDotDot},
		{name: "symlink_read", run: testSymlinkRead},
		{name: "symlink_write", run: testSymlinkWrite},
		{name: "remove_symlinked_dir", run: testRemoveSymlinkedDir},
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
	insidePasswd := e.shOK(t, "cat /etc/passwd")
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
	e.shOK(t, strings.Join([]string{
		"cd /workspace",
		"ln -s /etc/shadow shadow",
		"ln -s " + c.path + " canary",
		"ln -s ../../../../../../.." + c.path + " canary-rel",
		"ln -s " + c.dir + " canary-dir",
		"ln -s /proc/1/environ agent-environ",
		"ln -s /proc/1/cmdline agent-cmdline",
		"ln -s /proc/1/status agent-status",
		"ln -s /proc/self/environ self-environ",
		"ln -s /proc/self/status self-status",
		"ln -s /proc/self/root/etc/passwd self-root",
		"ln -s /proc/1/root/etc/passwd agent-root",
		"ln -s /proc/1/mem agent-mem",
		"ln -s loop1 loop2; ln -s loop2 loop1",
	}, " && "))
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
	insidePasswd := e.shOK(t, "cat /etc/passwd")
	newHost := filepath.Join(c.dir, "created-through-link")
	e.shOK(t, strings.Join([]string{
		"cd /workspace",
		"ln -s /etc/passwd passwd",
		"ln -s " + c.path + " canary",
		"ln -s " + newHost + " new-host-file",
		"ln -s " + c.dir + " host-dir",
		"ln -s /proc/1/root/etc/passwd agent-root",
	}, " && "))
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
	if got := e.shOK(t, "cat /etc/passwd"); got != insidePasswd {
		t.Errorf("the sandbox's read-only /etc/passwd changed through a symlink: %q", got)
	}
}

func testRemoveSymlinkedDir(t *testing.T, e *env) {
	c := newHostCanary(t)
	e.shOK(t, strings.Join([]string{
		"mkdir -p /workspace/keep/inner /workspace/victim/sub",
		"echo kept > /workspace/keep/inner/file",
		"echo gone > /workspace/victim/sub/file",
		"ln -s /workspace/keep /workspace/victim/link-to-keep",
		"ln -s ../keep/inner /workspace/victim/sub/rel-link",
		"ln -s /etc /workspace/victim/link-to-etc",
		"ln -s /tmp /workspace/victim/link-to-tmp",
		"ln -s " + c.dir + " /workspace/victim/link-to-host",
		"echo tmpfile > /tmp/keepme",
	}, " && "))
	if err := e.sb.Files().Remove(e.ctx, "/workspace/victim"); err != nil {
		t.Fatalf("Remove a directory holding symlinks: %v", err)
	}
	if _, err := e.sb.Files().Stat(e.ctx, "/workspace/victim"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("the directory still exists after Remove: %v", err)
	}
	if got := e.shOK(t, "cat /workspace/keep/inner/file /tmp/keepme; test -e /etc/passwd && echo etc"); got != "kept\ntmpfile\netc\n" {
		t.Errorf("Remove followed a symlink and deleted its target's contents: %q", got)
	}
	if got := hostFile(t, c.path); got != c.content+"\n" {
		t.Errorf("the host canary changed after Remove: %q", got)
	}
	// Removing a symlink to a directory removes the link only.
	e.shOK(t, "ln -s /workspace/keep /workspace/lonely-link")
	if err := e.sb.Files().Remove(e.ctx, "lonely-link"); err != nil {
		t.Errorf("Remove of a symlink: %v", err)
	}
	if got := e.shOK(t, "cat /workspace/keep/inner/file; test -L /workspace/lonely-link || echo link-gone"); got != "kept\nlink-gone\n" {
		t.Errorf("after removing a link to a directory: %q", got)
	}
	if !bytes.Equal([]byte(hostFile(t, c.path)), []byte(c.content+"\n")) {
		t.Errorf("the host canary changed")
	}
}
