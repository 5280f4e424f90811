package sandboxtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Snapshot cases: Capture and Apply (sandbox.Snapshotter) on a real
// workspace made by the workload's own commands.

func snapshotCases() []testCase {
	needs := []need{needShell, needSnapshots}
	return []testCase{
		{name: "capture_restore", needs: needs, run: testCaptureRestore},
		{name: "incremental", needs: needs, run: testIncremental},
		{name: "refuses_special_files", needs: needs, run: testRefusesSpecial},
		{name: "restore_without_room", needs: needs, run: testRestoreNoRoom},
		{name: "capture_while_writing", needs: needs, run: testCaptureWhileWriting},
		{name: "agent_killed_during_restore", needs: append(needs, needKill), closes: true, run: testKilledDuringRestore},
	}
}

// blobs is an in-memory content store.
type blobs struct {
	mu sync.Mutex
	m  map[string][]byte
}

func newBlobs() *blobs { return &blobs{m: map[string][]byte{}} }

func (b *blobs) put(_ context.Context, r io.Reader) (string, int64, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return "", 0, err
	}
	h := sha256.Sum256(data)
	d := "sha256:" + hex.EncodeToString(h[:])
	b.mu.Lock()
	b.m[d] = data
	b.mu.Unlock()
	return d, int64(len(data)), nil
}

func (b *blobs) have(d string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.m[d]
	return ok
}

func (b *blobs) get(_ context.Context, d string) (io.ReadCloser, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	data, ok := b.m[d]
	if !ok {
		return nil, fmt.Errorf("no content %s: %w", d, sandbox.ErrNotFound)
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

func (e *env) snapshotter(t *testing.T) sandbox.Snapshotter {
	t.Helper()
	sn, ok := e.sb.(sandbox.Snapshotter)
	if !ok {
		t.Fatalf("the %s driver declares Capabilities.Snapshots but its instance is no sandbox.Snapshotter", e.driver.Name())
	}
	return sn
}

func (e *env) capture(t *testing.T, st *blobs) sandbox.Capture {
	t.Helper()
	c, err := e.snapshotter(t).Capture(e.ctx, sandbox.CaptureRequest{Roots: []string{sandbox.Workspace}, Have: st.have}, st.put)
	if err != nil {
		t.Fatalf("capture: %v", err)
	}
	return c
}

// sameTree compares entries without mtimes (directories get theirs from
// the restore).
func sameTree(a, b []sandbox.TreeEntry) string {
	strip := func(es []sandbox.TreeEntry) string {
		var s strings.Builder
		for _, e := range es {
			fmt.Fprintf(&s, "%s %s %o %d %s %s\n", e.Path, e.Type, e.Mode, e.Size, e.Digest, e.Target)
		}
		return s.String()
	}
	if x, y := strip(a), strip(b); x != y {
		return "got:\n" + x + "want:\n" + y
	}
	return ""
}

// workspaceScript makes a workspace of every kind of entry the snapshot
// keeps.
const workspaceScript = `set -e
cd /workspace
mkdir -p src/deep/er ro empty
printf 'line 1\nline 2\n' > src/main.py
printf '\000\001\002binary' > src/blob.bin
: > src/empty.txt
head -c 300000 /dev/zero | tr '\0' 'x' > big.txt
chmod 600 src/main.py
chmod 751 src/deep
chmod 2775 src/deep/er
ln -s main.py src/link
ln -s ../../etc/passwd src/out
ln -s loop1 loop2; ln -s loop2 loop1
printf 'ro' > ro/file
chmod 555 ro
`

func testCaptureRestore(t *testing.T, e *env) {
	e.shOK(t, workspaceScript)
	st := newBlobs()
	before := e.capture(t, st)
	if len(before.Entries) < 14 {
		t.Fatalf("capture found %d entries", len(before.Entries))
	}
	// Change everything: add, change, delete, chmod, retarget, retype.
	e.shOK(t, `set -e
cd /workspace
chmod 755 ro
printf 'changed\n' > src/main.py
chmod 644 src/main.py
rm -r src/deep
rm src/empty.txt
ln -sfn elsewhere src/link
rm big.txt; mkdir big.txt; echo inside > big.txt/f
echo new > new.txt
mkdir -p added/dir; echo x > added/dir/y
rm empty -r; echo nowafile > empty
chmod 700 /workspace
`)
	stats, err := e.snapshotter(t).Apply(e.ctx, sandbox.ApplyRequest{Roots: []string{sandbox.Workspace}, Entries: before.Entries}, st.get)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	if stats.Removed == 0 || stats.Changed == 0 || stats.Added == 0 {
		t.Errorf("apply stats %+v", stats)
	}
	after := e.capture(t, st)
	if d := sameTree(after.Entries, before.Entries); d != "" {
		t.Fatalf("after the restore the workspace differs:\n%s", d)
	}
	// The workload owns what the restore made, and reads it as before.
	out := e.shOK(t, `cd /workspace && cat src/main.py && stat -c '%u %a' src/main.py src/deep/er ro && readlink src/link loop1 && id -u && ls -a`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 8 || lines[0] != "line 1" || lines[1] != "line 2" || !strings.HasSuffix(lines[2], " 600") || !strings.HasSuffix(lines[3], " 2775") || lines[5] != "main.py" || lines[6] != "loop2" {
		t.Fatalf("the restored workspace reads:\n%s", out)
	}
	uid := lines[7]
	for _, l := range lines[2:5] {
		if !strings.HasPrefix(l, uid+" ") {
			t.Errorf("a restored file is not the workload's (uid %s): %s", uid, l)
		}
	}
	if strings.Contains(out, ".airlock-restore") {
		t.Errorf("the staging directory was left behind:\n%s", out)
	}
	// Untouched content came back byte for byte.
	if got := e.shOK(t, `sha256sum /workspace/src/blob.bin | cut -c1-64`); strings.TrimSpace(got) != digestHex("\x00\x01\x02binary") {
		t.Errorf("blob.bin sha256 %s", got)
	}
}

func digestHex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func testIncremental(t *testing.T, e *env) {
	e.shOK(t, `python3 -c "[open('/workspace/f%d' % i, 'w').write('file %d\\n' % i) for i in range(1, 201)]"`)
	st := newBlobs()
	first := e.capture(t, st)
	if first.SentFiles != 200 {
		t.Errorf("first capture sent %d files, want 200", first.SentFiles)
	}
	e.shOK(t, `cd /workspace && echo changed > f7 && echo changed too > f8 && echo new > g`)
	second := e.capture(t, st)
	if second.SentFiles != 3 {
		t.Errorf("second capture sent %d files, want 3 (three new contents; the 198 unchanged files cost nothing)", second.SentFiles)
	}
	if len(second.Entries) != len(first.Entries)+1 {
		t.Errorf("second capture has %d entries, first %d", len(second.Entries), len(first.Entries))
	}
}

func testRefusesSpecial(t *testing.T, e *env) {
	st := newBlobs()
	tests := []struct {
		name, setup, undo string
		class             error
		says              string
	}{
		{"fifo", "mkfifo /workspace/pipe", "rm /workspace/pipe", sandbox.ErrInvalid, "FIFO"},
		{"socket", "python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('/workspace/sock')\"", "rm /workspace/sock", sandbox.ErrInvalid, "socket"},
		{"deep", "python3 -c \"import os; os.makedirs('/workspace/' + '/'.join(['d'] * 300))\"", "rm -rf /workspace/d", sandbox.ErrLimit, "deep"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.shOK(t, "echo keep > /workspace/keep && "+tt.setup)
			_, err := e.snapshotter(t).Capture(e.ctx, sandbox.CaptureRequest{Roots: []string{sandbox.Workspace}, Have: st.have}, st.put)
			if !errors.Is(err, tt.class) || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("capture with a %s: %v, want %v naming %q", tt.name, err, tt.class, tt.says)
			}
			if got := e.shOK(t, "cat /workspace/keep"); got != "keep\n" {
				t.Fatalf("the workspace changed: %q", got)
			}
			e.shOK(t, tt.undo)
		})
	}
	// A device node: the workload cannot make one; when it fails, there
	// is nothing to refuse.
	if o := e.sh(t, "mknod /workspace/dev c 1 3"); o.res.ExitCode == 0 {
		_, err := e.snapshotter(t).Capture(e.ctx, sandbox.CaptureRequest{Roots: []string{sandbox.Workspace}}, st.put)
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "device") {
			t.Errorf("capture with a device node: %v", err)
		}
		e.shOK(t, "rm /workspace/dev")
	}
	t.Run("more files than allowed", func(t *testing.T) {
		e.shOK(t, "cd /workspace && for i in $(seq 1 30); do : > q$i; done")
		_, err := e.snapshotter(t).Capture(e.ctx, sandbox.CaptureRequest{Roots: []string{sandbox.Workspace}, MaxFiles: 10}, st.put)
		if !errors.Is(err, sandbox.ErrLimit) {
			t.Fatalf("capture past MaxFiles: %v", err)
		}
	})
}

func testRestoreNoRoom(t *testing.T, e *env) {
	// The workspace is 32 MiB: a snapshot of 20 MiB of other content
	// cannot be staged beside 20 MiB of current content.
	e.shOK(t, `head -c 20000000 /dev/zero | tr '\0' 'a' > /workspace/a`)
	st := newBlobs()
	snap := e.capture(t, st)
	e.shOK(t, `rm /workspace/a && head -c 20000000 /dev/zero | tr '\0' 'b' > /workspace/b`)
	before := e.capture(t, st)
	_, err := e.snapshotter(t).Apply(e.ctx, sandbox.ApplyRequest{Roots: []string{sandbox.Workspace}, Entries: snap.Entries}, st.get)
	if !errors.Is(err, sandbox.ErrLimit) || !strings.Contains(err.Error(), "room") {
		t.Fatalf("restore without room: %v, want ErrLimit saying there is no room", err)
	}
	if d := sameTree(e.capture(t, st).Entries, before.Entries); d != "" {
		t.Fatalf("the failed restore changed the workspace:\n%s", d)
	}
	if o := e.sh(t, "ls -a /workspace"); strings.Contains(o.stdout, ".airlock-restore") {
		t.Errorf("staging left behind: %s", o.stdout)
	}
}

func testCaptureWhileWriting(t *testing.T, e *env) {
	// A command rewrites a 256 KiB file in place, over and over, with one
	// letter each time; every capture must hold a version the file had
	// (empty, or some of one letter's bytes: a write in progress), never
	// two letters mixed, unless it names the file unsettled.
	p, err := e.sb.Start(e.ctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", `cd /workspace; while :; do for c in a b c d; do head -c 262144 /dev/zero | tr '\0' $c > f; done; done`}, Background: true, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Signal(context.Background(), 9) }()
	e.waitFile(t, "/workspace/f")
	st := newBlobs()
	for i := range 5 {
		c, err := e.snapshotter(t).Capture(e.ctx, sandbox.CaptureRequest{Roots: []string{sandbox.Workspace}, Have: st.have}, st.put)
		if err != nil {
			t.Fatalf("capture %d while a command writes: %v", i, err)
		}
		for _, en := range c.Entries {
			if en.Path != "/workspace/f" {
				continue
			}
			data, _ := st.get(e.ctx, en.Digest)
			b, _ := io.ReadAll(data)
			if len(b) == 0 || len(bytes.Trim(b, string(b[:1]))) == 0 {
				continue // one version of the file
			}
			unsettled := false
			for _, u := range c.Unsettled {
				unsettled = unsettled || u == en.Path
			}
			if !unsettled {
				t.Fatalf("capture %d holds a torn /workspace/f (%d bytes) without naming it unsettled: %.40q…", i, len(b), b)
			}
		}
	}
}

func testKilledDuringRestore(t *testing.T, e *env) {
	const files = `python3 -c "import os; [open('/workspace/f%d' % i, 'wb').write(os.urandom(20000)) for i in range(400)]"`
	e.shOK(t, files)
	st := newBlobs()
	snap := e.capture(t, st)
	e.shOK(t, files+` && mkdir /workspace/more && touch /workspace/more/x`)
	errc := make(chan error, 1)
	go func() {
		_, err := e.snapshotter(t).Apply(e.ctx, sandbox.ApplyRequest{Roots: []string{sandbox.Workspace}, Entries: snap.Entries}, st.get)
		errc <- err
	}()
	time.Sleep(30 * time.Millisecond)
	e.opts.KillAgent(t, e.sb)
	var err error
	select {
	case err = <-errc:
	case <-time.After(30 * time.Second):
		t.Fatal("the restore did not end after the agent was killed")
	}
	select {
	case <-e.sb.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the sandbox did not end when its agent was killed")
	}
	// The agent's death ends the sandbox (it is PID 1): no half-restored
	// workspace can be read; an Apply that finished first is fine too.
	if err != nil && !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("restore interrupted by the agent's death: %v, want an error wrapping ErrClosed", err)
	}
	if _, err := e.sb.Files().Stat(e.ctx, "/workspace"); err == nil {
		t.Error("the sandbox still serves files after its agent was killed")
	}
	e.close(t, e.sb)
}
