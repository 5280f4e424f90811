package sandboxtest

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

func fileCases() []testCase {
	return []testCase{
		{name: "read_write", needs: []need{needFiles}, run: testReadWrite},
		{name: "dirs", needs: []need{needFiles}, run: testDirs},
		{name: "ownership", needs: []need{needShell, needFiles}, run: testOwnership},
		{name: "home", needs: []need{needShell, needFiles, needHome}, spec: homeSpec, run: testHome},
	}
}

func testReadWrite(t *testing.T, e *env) {
	f := e.sb.Files()
	e.writeFile(t, "/workspace/hello.txt", "0123456789", 0o644)
	t.Run("whole", func(t *testing.T) {
		for _, p := range []string{"/workspace/hello.txt", "hello.txt", "./hello.txt", "/workspace/../workspace/hello.txt"} {
			if got, err := e.readFile(p); err != nil || got != "0123456789" {
				t.Errorf("ReadFile %s: %q, %v", p, got, err)
			}
		}
	})
	t.Run("offset_limit", func(t *testing.T) {
		for _, c := range []struct {
			offset, limit int64
			want          string
		}{
			{offset: 0, limit: 0, want: "0123456789"},
			{offset: 3, limit: 4, want: "3456"},
			{offset: 3, limit: 0, want: "3456789"},
			{offset: 8, limit: 100, want: "89"},
			{offset: 0, limit: 1, want: "0"},
			{offset: 10, limit: 0, want: ""},
			{offset: 50, limit: 5, want: ""},
		} {
			var b bytes.Buffer
			err := f.ReadFile(e.ctx, "hello.txt", c.offset, c.limit, &b)
			if err != nil || b.String() != c.want {
				t.Errorf("ReadFile offset %d limit %d: %q, %v; want %q", c.offset, c.limit, b.String(), err, c.want)
			}
		}
	})
	t.Run("replace", func(t *testing.T) {
		e.writeFile(t, "hello.txt", "short", 0o644)
		if got, err := e.readFile("hello.txt"); err != nil || got != "short" {
			t.Errorf("after replacing, ReadFile: %q, %v", got, err)
		}
	})
	t.Run("large", func(t *testing.T) {
		data := make([]byte, 3<<20+17)
		_, _ = rand.Read(data)
		if err := f.WriteFile(e.ctx, "big.bin", bytes.NewReader(data), 0o600); err != nil {
			t.Fatalf("WriteFile of 3 MiB: %v", err)
		}
		var b bytes.Buffer
		if err := f.ReadFile(e.ctx, "big.bin", 0, 0, &b); err != nil || !bytes.Equal(b.Bytes(), data) {
			t.Errorf("3 MiB did not round-trip: %d bytes back, err %v", b.Len(), err)
		}
		if got := e.ok(t, e.w.FileSize("/workspace/big.bin")); strings.TrimSpace(got) != "3145745" {
			t.Errorf("a command sees %s bytes in the file written through the API", got)
		}
	})
	t.Run("missing", func(t *testing.T) {
		_, err := e.readFile("no-such-file")
		if !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("ReadFile of a missing file: %v, want ErrNotFound", err)
		}
		if _, err := f.Stat(e.ctx, "no-such-file"); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("Stat of a missing file: %v, want ErrNotFound", err)
		}
	})
	t.Run("not_a_file", func(t *testing.T) {
		if _, err := e.readFile("/workspace"); err == nil {
			t.Errorf("ReadFile of a directory succeeded")
		}
	})
	t.Run("read_only_places", func(t *testing.T) {
		for _, p := range []string{"/usr/airlock-test", "/airlock-test", "/etc/passwd"} {
			if err := f.WriteFile(e.ctx, p, strings.NewReader("x"), 0o644); err == nil {
				t.Errorf("WriteFile %s succeeded; the root is read-only", p)
			}
		}
	})
}

func testDirs(t *testing.T, e *env) {
	f := e.sb.Files()
	if err := f.Mkdir(e.ctx, "a/b/c", 0o755); err != nil {
		t.Fatalf("Mkdir a/b/c: %v", err)
	}
	if err := f.Mkdir(e.ctx, "a/b/c", 0o755); err != nil {
		t.Errorf("Mkdir of an existing directory: %v (want nil, as mkdir -p)", err)
	}
	e.writeFile(t, "a/b/c/file.txt", "content", 0o640)
	if err := f.Mkdir(e.ctx, "a/b/c/file.txt/sub", 0o755); err == nil {
		t.Errorf("Mkdir below a file succeeded")
	}
	if err := f.Symlink(e.ctx, "file.txt", "/workspace/a/b/c/link"); err != nil {
		t.Fatalf("Symlink: %v", err)
	}

	t.Run("stat", func(t *testing.T) {
		fi, err := f.Stat(e.ctx, "/workspace/a/b/c/file.txt")
		if err != nil {
			t.Fatalf("Stat: %v", err)
		}
		if fi.Name != "file.txt" || fi.Size != 7 || fi.Type != "file" || fi.Mode.Perm() != 0o640 {
			t.Errorf("Stat of a 7-byte 0640 file: %+v", fi)
		}
		fi, err = f.Stat(e.ctx, "a/b")
		if err != nil || fi.Type != "dir" || !fi.Mode.IsDir() {
			t.Errorf("Stat of a directory: %+v, %v", fi, err)
		}
		fi, err = f.Stat(e.ctx, "a/b/c/link")
		if err != nil || fi.Type != "symlink" || fi.Target != "file.txt" {
			t.Errorf("Stat of a symlink (not followed): %+v, %v", fi, err)
		}
	})
	t.Run("read_dir", func(t *testing.T) {
		list, err := f.ReadDir(e.ctx, "a/b/c")
		if err != nil {
			t.Fatalf("ReadDir: %v", err)
		}
		got := map[string]string{}
		for _, fi := range list {
			got[fi.Name] = fi.Type
		}
		if len(got) != 2 || got["file.txt"] != "file" || got["link"] != "symlink" {
			t.Errorf("ReadDir a/b/c: %+v", list)
		}
		if _, err := f.ReadDir(e.ctx, "a/b/c/file.txt"); err == nil {
			t.Errorf("ReadDir of a file succeeded")
		}
	})
	t.Run("rename", func(t *testing.T) {
		if err := f.Rename(e.ctx, "a/b/c/file.txt", "/workspace/a/moved.txt"); err != nil {
			t.Fatalf("Rename: %v", err)
		}
		if _, err := f.Stat(e.ctx, "a/b/c/file.txt"); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("the old name still exists after Rename: %v", err)
		}
		if got, err := e.readFile("a/moved.txt"); err != nil || got != "content" {
			t.Errorf("ReadFile of the new name: %q, %v", got, err)
		}
		if got := e.ok(t, e.w.ReadFiles("/workspace/a/moved.txt")); got != "content" {
			t.Errorf("a command reads %q from the renamed file", got)
		}
	})
	t.Run("remove", func(t *testing.T) {
		if err := f.Remove(e.ctx, "a/moved.txt"); err != nil {
			t.Errorf("Remove of a file: %v", err)
		}
		if err := f.Remove(e.ctx, "a"); err != nil {
			t.Fatalf("Remove of a tree: %v", err)
		}
		if _, err := f.Stat(e.ctx, "a"); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("Stat after Remove: %v, want ErrNotFound", err)
		}
		if got := e.ok(t, e.w.ListDir("/workspace")); slices.Contains(strings.Split(got, "\n"), "a") {
			t.Errorf("a command still sees the removed tree: %q", got)
		}
	})
}

func testOwnership(t *testing.T, e *env) {
	f := e.sb.Files()
	t.Run("api_to_command", func(t *testing.T) {
		e.writeFile(t, "private.txt", "secret for the workload", 0o600)
		if err := f.Mkdir(e.ctx, "made/by/api", 0o700); err != nil {
			t.Fatalf("Mkdir: %v", err)
		}
		got := e.shOK(t, "stat -c '%u:%g %a' /workspace/private.txt /workspace/made/by/api; cat /workspace/private.txt; echo x > /workspace/made/by/api/w && echo writable")
		want := "1000:1000 600\n1000:1000 700\nsecret for the workload" + "writable\n"
		if got != want {
			t.Errorf("files made through the API, seen by a command: %q, want %q (owned by the workload, readable and writable by it)", got, want)
		}
	})
	t.Run("command_to_api", func(t *testing.T) {
		e.shOK(t, "mkdir -p /workspace/out /tmp/out && echo from-command > /workspace/out/a.txt && printf tmpdata > /tmp/out/b && chmod 600 /workspace/out/a.txt")
		if got, err := e.readFile("out/a.txt"); err != nil || got != "from-command\n" {
			t.Errorf("ReadFile of a file a command wrote: %q, %v", got, err)
		}
		if got, err := e.readFile("/tmp/out/b"); err != nil || got != "tmpdata" {
			t.Errorf("ReadFile of /tmp/out/b a command wrote: %q, %v", got, err)
		}
		list, err := f.ReadDir(e.ctx, "out")
		if err != nil || !slices.ContainsFunc(list, func(fi sandbox.FileInfo) bool { return fi.Name == "a.txt" }) {
			t.Errorf("ReadDir out: %+v, %v", list, err)
		}
		// Overwriting a command's file through the API keeps it the workload's.
		e.writeFile(t, "out/a.txt", "from-api\n", 0o644)
		if got := e.shOK(t, "cat /workspace/out/a.txt; stat -c %u /workspace/out/a.txt"); got != "from-api\n1000\n" {
			t.Errorf("after the API replaced a command's file, the command sees %q", got)
		}
	})
	t.Run("mode", func(t *testing.T) {
		e.writeFile(t, "run.sh", "#!/bin/sh\necho executed\n", 0o755)
		if got := e.shOK(t, "/workspace/run.sh"); got != "executed\n" {
			t.Errorf("a 0755 file written through the API runs as %q", got)
		}
		fi, err := f.Stat(e.ctx, "run.sh")
		if err != nil || fi.Mode.Perm() != fs.FileMode(0o755) {
			t.Errorf("Stat run.sh: %+v, %v", fi, err)
		}
	})
}
