package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testcap"
	"github.com/airlock-sandbox/airlock/internal/testrig"
)

// TestExportAndS3SnapshotsCLI runs two daemons (native driver) whose
// config keeps snapshots in a real S3 server (versitygw) and exports to
// it: `airlock sandbox export` stores a CSV and refuses a PNG named .csv;
// a snapshot taken through one daemon is listed by the other (an operator
// key sees every key's snapshots), and restores on the first.
func TestExportAndS3SnapshotsCLI(t *testing.T) {
	requireE2E(t)
	testcap.Require(t, "s3")
	srv := testrig.StartS3(t)
	for _, b := range []string{"agent-outputs", "snaps"} {
		if err := srv.MakeBucket(b); err != nil {
			t.Fatal(err)
		}
	}
	config := fmt.Sprintf(`
[[template]]
name = "default"
export_types = ["text/csv"]

[object_store]
endpoint = %q
region = %q
access_key_id = %q
secret_access_key = %q

[snapshots]
store = "s3"
bucket = "snaps"
prefix = "e2e"

[export]
buckets = ["agent-outputs"]
`, srv.Endpoint, srv.Region, srv.AccessKey, srv.SecretKey)
	start := func() (*daemon, string, string) {
		dir := t.TempDir()
		cfg := filepath.Join(dir, "config.toml")
		if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
		key := newKey(t, dir, "agent")
		op := newKey(t, dir, "operator")
		return startDaemon(t, dir, "--config", cfg), key, op
	}
	a, keyA, _ := start()
	b, _, opB := start()
	cli := func(url, key string, args ...string) outcomeOf {
		t.Helper()
		return airlockRun(t, invocation{args: args, env: []string{"AIRLOCK_URL=" + url, "AIRLOCK_API_KEY=" + key}})
	}
	must := func(url, key string, args ...string) string {
		t.Helper()
		o := cli(url, key, args...)
		if o.code != 0 {
			t.Fatalf("airlock %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), o.code, o.stdout, o.stderr)
		}
		return o.stdout
	}
	id := strings.TrimSpace(must(a.url, keyA, "sandbox", "create"))
	must(a.url, keyA, "sandbox", "exec", id, "--", "sh", "-c",
		`mkdir out && printf 'name,count\nalpha,1\nbeta,2\n' > out/table.txt && printf '\211PNG\r\n\032\n\0\0\0\rIHDR\0\0\0\1\0\0\0\1\10\6\0\0\0' > out/data.csv`)

	out := must(a.url, keyA, "sandbox", "export", "--exec", "ex-1", id+":/workspace/out/table.txt", "s3://agent-outputs/run-1/")
	if !strings.HasPrefix(out, "s3://agent-outputs/run-1/table.txt\t26\ttext/csv; charset=utf-8\tsha256:") {
		t.Fatalf("export printed %q", out)
	}
	if got, err := os.ReadFile(filepath.Join(srv.Dir, "agent-outputs", "run-1", "table.txt")); err != nil || string(got) != "name,count\nalpha,1\nbeta,2\n" {
		t.Fatalf("the server holds %q, %v", got, err)
	}
	o := cli(a.url, keyA, "sandbox", "export", id+":/workspace/out/data.csv", "s3://agent-outputs/run-1/")
	if o.code == 0 || !strings.Contains(o.stderr, "image/png") || !strings.Contains(o.stderr, "type_refused") {
		t.Fatalf("a PNG named .csv: exit %d, %s", o.code, o.stderr)
	}
	if _, err := os.Stat(filepath.Join(srv.Dir, "agent-outputs", "run-1", "data.csv")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the refused file is in the bucket: %v", err)
	}

	snap := strings.TrimSpace(must(a.url, keyA, "sandbox", "snapshot", "--name", "base", id))
	if ls := must(b.url, opB, "sandbox", "snapshot", "ls"); !strings.Contains(ls, snap) {
		t.Fatalf("the other daemon does not list %s:\n%s", snap, ls)
	}
	must(a.url, keyA, "sandbox", "exec", id, "--", "rm", "-r", "out")
	must(a.url, keyA, "sandbox", "restore", id, "base")
	if got := must(a.url, keyA, "sandbox", "exec", id, "--", "cat", "out/table.txt"); got != "name,count\nalpha,1\nbeta,2\n" {
		t.Fatalf("after the restore from the bucket: %q", got)
	}
}
