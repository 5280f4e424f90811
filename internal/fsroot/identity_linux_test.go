//go:build linux

package fsroot

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestIdentity checks, as root, that operations run with exactly the
// workload's permissions and that the thread's identity comes back.
func TestIdentity(t *testing.T) {
	requireRoot(t)
	f := newFixture(t, 1000, 1000, "/workspace")
	if err := os.Chown(f.ws, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(f.ws, "secret")
	write(t, secret, "SECRET")
	if err := os.Chmod(secret, 0o600); err != nil {
		t.Fatal(err)
	}
	// Give every thread of this process a supplementary group: the file API
	// must drop it, as a workload started with gid 1000 has none.
	const extraGroup = 4242
	if err := syscall.Setgroups([]int{extraGroup}); err != nil {
		skipOrFail(t, "root", "setgroups: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Setgroups(nil); err != nil {
			t.Errorf("restore groups: %v", err)
		}
	})
	groupOnly := filepath.Join(f.ws, "grouponly") // readable by extraGroup only
	write(t, groupOnly, "GROUP")
	if err := os.Chown(groupOnly, 0, extraGroup); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(groupOnly, 0o040); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(f.root, "rootonly"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(f.root, "rootonly", "file"), "x")

	denied := []struct {
		name string
		op   func() error
	}{
		{name: "read a 0600 root file", op: func() error { _, err := readString(f.r, "secret"); return err }},
		{name: "read a file of a supplementary group", op: func() error { _, err := readString(f.r, "grouponly"); return err }},
		{name: "write in a root directory", op: func() error { return writeString(f.r, "/rootonly/new", "x") }},
		{name: "mkdir in a root directory", op: func() error { return f.r.Mkdir("/rootonly/sub", 0o755) }},
		{name: "remove from a root directory", op: func() error { return f.r.Remove("/rootonly/file") }},
		{name: "rename out of a root directory", op: func() error { return f.r.Rename("/rootonly/file", "stolen") }},
	}
	for _, tt := range denied {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.op()
			if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), "permission denied") {
				t.Fatalf("%v; want permission denied", err)
			}
		})
	}

	if err := writeString(f.r, "mine.txt", "mine"); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	if err := f.r.Mkdir("mydir/sub", 0o755); err != nil {
		t.Fatalf("Mkdir: %v", err)
	}
	for _, p := range []string{"mine.txt", "mydir", "mydir/sub"} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(f.ws, p), &st); err != nil || st.Uid != 1000 || st.Gid != 1000 {
			t.Fatalf("%s is owned by %d:%d (%v); want 1000:1000", p, st.Uid, st.Gid, err)
		}
	}
	if err := f.r.Remove("mydir"); err != nil {
		t.Fatalf("Remove of its own tree: %v", err)
	}

	// Root and uid 1000 running side by side never see each other's identity.
	rootRoot, err := Open(f.root, -1, -1, "/workspace")
	if err != nil {
		t.Fatal(err)
	}
	defer rootRoot.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for range 100 {
		wg.Go(func() {
			if _, err := readString(f.r, "secret"); !errors.Is(err, fs.ErrPermission) {
				errs <- errors.New("uid 1000 read the secret: " + errString(err))
			}
		})
		wg.Go(func() {
			if got, err := readString(rootRoot, "secret"); err != nil || got != "SECRET" {
				errs <- errors.New("root could not read the secret: " + errString(err))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got, err := readString(rootRoot, "grouponly"); err != nil || got != "GROUP" {
		t.Fatalf("the caller's own groups are lost: %q, %v", got, err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	groups, err := unix.Getgroups()
	if u, g := currentFsuid(), currentFsgid(); u != os.Geteuid() || g != os.Getegid() || err != nil || len(groups) != 1 || groups[0] != extraGroup {
		t.Fatalf("this thread's identity is %d:%d groups %v (%v) after the operations", u, g, groups, err)
	}
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}
