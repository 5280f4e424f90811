package wasm_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/driver/wasm"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// run runs req in sb and returns what it printed.
func run(t *testing.T, sb sandbox.Instance, req sandbox.ExecRequest) (string, string, sandbox.Result) {
	t.Helper()
	var out, errb bytes.Buffer
	req.Stdout, req.Stderr = &out, &errb
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := sandbox.Run(ctx, sb, req)
	if err != nil {
		t.Fatalf("run %q: %v", req.Argv, err)
	}
	return out.String(), errb.String(), res
}

func python(code string) sandbox.ExecRequest {
	return sandbox.ExecRequest{Argv: []string{"python3", "-c", code}}
}

func create(t *testing.T, d *wasm.Driver, spec sandbox.Spec) sandbox.Instance {
	t.Helper()
	sb, err := d.Create(context.Background(), spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _ = sb.Close(context.Background()) })
	return sb
}

// TestMemoryLimit: a memory.grow past the sandbox's limit is refused; the
// program sees an allocation failure. One that fails of it ends with
// reason oom; one that copes exits 0 with memory in limits_hit; the
// sandbox's memory is free again afterwards.
func TestMemoryLimit(t *testing.T) {
	d, _ := newTestDriver(t)
	sb := create(t, d, sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 64 << 20}})
	_, stderr, res := run(t, sb, python("x = []\nwhile True: x.append(b'x' * (8 << 20))"))
	if res.Reason != sandbox.ReasonOOM || res.ExitCode != 1 || !res.Hit(sandbox.LimitMemory) || !strings.Contains(stderr, "MemoryError") {
		t.Errorf("a memory bomb: want exit 1, reason oom, memory in limits_hit, MemoryError; got %+v, stderr %q", res, stderr)
	}
	if !strings.Contains(res.Message, "64 MiB") {
		t.Errorf("the message does not name the limit: %q", res.Message)
	}
	out, _, res := run(t, sb, python("try:\n    b = bytearray(200 << 20)\nexcept MemoryError:\n    print('coped')"))
	if res.Reason != sandbox.ReasonExit || res.ExitCode != 0 || out != "coped\n" || !res.Hit(sandbox.LimitMemory) {
		t.Errorf("a program that copes with MemoryError: want exit 0, reason exit, memory in limits_hit; got %+v, %q", res, out)
	}
	// Two execs at once share the limit; each alone fits.
	out, _, res = run(t, sb, python("b = bytearray(40 << 20); print(len(b) >> 20)"))
	if res.ExitCode != 0 || out != "40\n" {
		t.Errorf("after the bomb, 40 MiB do not fit in 64: %+v %q", res, out)
	}
	if res.Usage.MemoryPeakBytes < 40<<20 {
		t.Errorf("usage says a peak of %d bytes for 40 MiB", res.Usage.MemoryPeakBytes)
	}
}

// TestDiskLimits: writes past a mount's size fail, the result says
// disk_full, and removing files makes room again.
func TestDiskLimits(t *testing.T) {
	d, _ := newTestDriver(t)
	sb := create(t, d, sandbox.Spec{Limits: sandbox.Limits{DiskBytes: 8 << 20, TmpBytes: 4 << 20}})
	for _, c := range []struct{ dir, size string }{{"/workspace", "8"}, {"/tmp", "4"}} {
		prog := `import os, sys
mib = b"\0" * (1 << 20)
try:
    with open(sys.argv[1] + "/big", "wb") as f:
        for _ in range(100):
            f.write(mib)
            f.flush()
except OSError as e:
    print("failed", e.errno)
print(os.path.getsize(sys.argv[1] + "/big") >> 20)
os.remove(sys.argv[1] + "/big")
with open(sys.argv[1] + "/again", "wb") as f:
    f.write(mib)
print("again")`
		out, stderr, res := run(t, sb, sandbox.ExecRequest{Argv: []string{"python3", "-c", prog, c.dir}})
		if res.ExitCode != 0 || !res.Hit(sandbox.LimitDiskFull) || !strings.HasPrefix(out, "failed ") || !strings.HasSuffix(out, c.size+"\nagain\n") {
			t.Errorf("filling %s: want a failed write at %s MiB, disk_full, room after removing; got %+v, %q, %q", c.dir, c.size, res, out, stderr)
		}
	}
	// The file API is held to the same size.
	err := sb.Files().WriteFile(context.Background(), "/tmp/api", bytes.NewReader(make([]byte, 5<<20)), 0o644)
	if !errors.Is(err, sandbox.ErrLimit) {
		t.Errorf("writing 5 MiB into a 4 MiB /tmp through the file API: %v, want ErrLimit", err)
	}
	if err := sb.Files().WriteFile(context.Background(), "/etc/x", strings.NewReader("x"), 0o644); err == nil {
		t.Errorf("the file API wrote outside /workspace and /tmp")
	}
}

// TestPersistence: files in /workspace outlive the exec that wrote them,
// and the file API sees them.
func TestPersistence(t *testing.T) {
	d, _ := newTestDriver(t)
	sb := create(t, d, sandbox.Spec{})
	if _, _, res := run(t, sb, python("open('state.txt', 'w').write('kept')")); res.ExitCode != 0 {
		t.Fatalf("write: %+v", res)
	}
	out, _, res := run(t, sb, python("import os; print(os.getcwd(), open('/workspace/state.txt').read())"))
	if res.ExitCode != 0 || out != "/workspace kept\n" {
		t.Errorf("a later exec reads %q (%+v), want /workspace kept", out, res)
	}
	var b bytes.Buffer
	if err := sb.Files().ReadFile(context.Background(), "state.txt", 0, 0, &b); err != nil || b.String() != "kept" {
		t.Errorf("the file API reads %q, %v", b.String(), err)
	}
}

// TestRefused: what a wasm sandbox cannot do is refused, before the
// driver sees it, by its capabilities (sandbox.CheckSpec, CheckExec) with
// the driver's reason and what to use instead.
func TestRefused(t *testing.T) {
	d, _ := newTestDriver(t)
	caps := d.Capabilities()
	for _, tt := range []struct {
		name string
		spec sandbox.Spec
		want string
	}{
		{"egress", sandbox.Spec{Network: sandbox.Network{Mode: sandbox.NetworkEgress, AllowHosts: []string{"example.com"}}}, "no sockets"},
		{"root", sandbox.Spec{Root: "/srv/root"}, "only its own /workspace"},
		{"mount", sandbox.Spec{Mounts: []sandbox.Mount{{Source: "/srv", Target: "/srv"}}}, "only its own /workspace"},
	} {
		if err := caps.CheckSpec("wasm", tt.spec); !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "--driver native") {
			t.Errorf("%s: %v, want ErrUnsupported saying %q and naming another driver", tt.name, err, tt.want)
		}
	}
	if err := caps.CheckSpec("wasm", sandbox.Spec{Module: "/srv/m.wasm"}); err != nil {
		t.Errorf("a module: %v", err)
	}
	sb := create(t, d, sandbox.Spec{})
	if _, _, res := run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", "true"}}); res.ExitCode != 127 || !strings.Contains(res.Message, "no shell") {
		t.Errorf("sh: %+v, want 127 and a message", res)
	}
	if err := caps.CheckExec("wasm", sandbox.ExecRequest{Argv: []string{"python3", "-c", "1"}, Background: true}); !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), "one program per exec") {
		t.Errorf("a background exec: %v, want ErrUnsupported with the driver's reason", err)
	}
	if err := caps.CheckExec("wasm", sandbox.ExecRequest{Argv: []string{"python3"}, PTY: &sandbox.TermSize{Rows: 24, Cols: 80}}); !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), "no terminals") {
		t.Errorf("an exec on a terminal: %v, want ErrUnsupported with the driver's reason", err)
	}
}

// TestModule: a WASI command module of the user's own (Go built for
// wasip1) runs by its name, with its arguments, environment, files and
// exit code.
func TestModule(t *testing.T) {
	d, _ := newTestDriver(t)
	mod := filepath.Join(t.TempDir(), "echo.wasm")
	cmd := exec.Command("go", "build", "-o", mod, "./testdata/echo")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the test module: %v\n%s", err, out)
	}
	sb := create(t, d, sandbox.Spec{Module: mod})
	if err := sb.Files().WriteFile(context.Background(), "in.txt", strings.NewReader("from the file API\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, res := run(t, sb, sandbox.ExecRequest{Argv: []string{"echo", "a b", "c"}, Env: []string{"EXIT=7"}})
	if res.ExitCode != 7 || res.Reason != sandbox.ReasonExit || out != "a b c\nfrom the file API\n" {
		t.Errorf("the module: want exit 7 and its output, got %+v, %q, %q", res, out, stderr)
	}
	var b bytes.Buffer
	if err := sb.Files().ReadFile(context.Background(), "/workspace/out.txt", 0, 0, &b); err != nil || b.String() != "from the module\n" {
		t.Errorf("the module's file: %q, %v", b.String(), err)
	}
	// Python runs beside it.
	if out, _, res := run(t, sb, python("print(6*7)")); res.ExitCode != 0 || out != "42\n" {
		t.Errorf("python beside the module: %+v %q", res, out)
	}
}
