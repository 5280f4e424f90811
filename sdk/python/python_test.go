// Package python_test runs the Python SDK's own test suite from `go test`,
// so that `make test` (and CI) installs and tests the SDK the way its
// README says: offline, into a fresh venv, against a real `airlock serve`.
package python_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testcap"
	"github.com/airlock-sandbox/airlock/internal/testrig"
)

// unittest -v prints one line per test on stderr: "NAME (ID) ... STATUS".
var (
	resultRE = regexp.MustCompile(`(?m)^(\w+) \(([\w.]+)\) \.\.\. (ok|FAIL|ERROR|skipped .*|expected failure|unexpected success)$`)
	ranRE    = regexp.MustCompile(`(?m)^Ran (\d+) tests? in `)
)

// TestPythonSDK builds airlock, installs sdk/python with
//
//	python3 -m venv v && v/bin/pip install --no-build-isolation --no-index ./sdk/python
//
// and runs `python3 -m unittest` in sdk/python with that venv's Python.
// The Python suite starts the daemon itself (tests/daemon.py). Each Python
// test is reported as a subtest.
func TestPythonSDK(t *testing.T) {
	testcap.Require(t, "root", "userns", "cgroupv1", "seccomp", "landlock")
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is not installed: run `make deps` (Debian: apt-get install python3 python3-venv): %v", err)
	}
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	// The airlock the suite runs, with its agent beside it (as cmd/airlock-full's
	// end-to-end tests build them).
	for _, b := range []struct{ out, pkg string }{
		{"airlock-agent", "./cmd/airlock-agent"},
		{"airlock", "./cmd/airlock-full"},
	} {
		run(ctx, t, repo, []string{"CGO_ENABLED=0"}, "go", "build", "-trimpath", "-o", filepath.Join(tmp, b.out), b.pkg)
	}

	venv := filepath.Join(tmp, "v")
	start := time.Now()
	noCache := []string{"PYTHONDONTWRITEBYTECODE=1"} // leave no __pycache__ in the checkout
	run(ctx, t, repo, noCache, python, "-m", "venv", venv)
	run(ctx, t, repo, noCache, filepath.Join(venv, "bin", "pip"), "install", "--no-build-isolation", "--no-index", "./sdk/python")
	t.Logf("venv and install: %s", time.Since(start).Round(time.Millisecond))
	vpy := filepath.Join(venv, "bin", "python3")
	where := strings.TrimSpace(run(ctx, t, tmp, nil, vpy, "-c", "import airlock; print(airlock.__file__)"))
	if !strings.HasPrefix(where, venv+string(filepath.Separator)) {
		t.Fatalf("the venv imports airlock from %s, not from its own site-packages", where)
	}

	// The export tests need an S3 server: versitygw where the s3
	// capability works (CI requires it; elsewhere those tests skip).
	var s3env []string
	if r := testcap.Probe(ctx, "s3"); r.OK {
		srv := testrig.StartS3(t)
		if err := srv.MakeBucket("agent-outputs"); err != nil {
			t.Fatal(err)
		}
		s3env = append(s3env, "AIRLOCK_TEST_S3="+strings.Join([]string{srv.Endpoint, srv.Region, srv.AccessKey, srv.SecretKey, "agent-outputs"}, " "))
	} else {
		t.Logf("the export tests skip: s3: %s (fix: %s)", r.Why, r.Fix)
	}

	cmd := exec.CommandContext(ctx, vpy, "-m", "unittest", "-v")
	cmd.Dir = filepath.Join(repo, "sdk", "python")
	cmd.Env = append(append(os.Environ(), s3env...),
		"AIRLOCK_BIN="+filepath.Join(tmp, "airlock"),
		"AIRLOCK_AGENT="+filepath.Join(tmp, "airlock-agent"),
		"PYTHONDONTWRITEBYTECODE=1",
		"PYTHONUNBUFFERED=1",
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 10 * time.Second
	start = time.Now()
	runErr := cmd.Run()
	t.Logf("python3 -m unittest: %s", time.Since(start).Round(time.Millisecond))
	if s := strings.TrimSpace(stdout.String()); s != "" {
		t.Logf("the suite printed:\n%s", s)
	}

	out := stderr.String()
	results := resultRE.FindAllStringSubmatch(out, -1)
	for _, m := range results {
		id, status := m[2], m[3]
		t.Run(id, func(t *testing.T) {
			switch {
			case status == "ok", status == "expected failure":
			case strings.HasPrefix(status, "skipped"):
				t.Skip(status)
			default:
				t.Errorf("%s: %s (the suite's report below)", id, status)
			}
		})
	}
	ran := ranRE.FindStringSubmatch(out)
	switch {
	case runErr != nil:
		t.Fatalf("python3 -m unittest: %v\n%s", runErr, tail(out, 150))
	case ran == nil:
		t.Fatalf("python3 -m unittest printed no summary:\n%s", tail(out, 150))
	case ran[1] != strconv.Itoa(len(results)) || len(results) == 0:
		t.Fatalf("python3 -m unittest ran %s tests, %d reported as this test reads them:\n%s", ran[1], len(results), tail(out, 150))
	}
}

// run runs a command to its end and fails the test with its output when it
// fails; it returns its stdout.
func run(ctx context.Context, t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[%d lines before]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
