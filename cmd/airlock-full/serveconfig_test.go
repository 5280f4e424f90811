package main

import (
	"bufio"
	"context"
	"encoding/json"
	"github.com/airlock-sandbox/airlock/internal/cli"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCheckConfig runs airlock serve --check-config on files with each
// kind of mistake the daemon's own checks find (the config parser's kinds
// are tested in internal/supervisor): the exit code, and the key and line
// on stderr.
func TestCheckConfig(t *testing.T) {
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	dir := t.TempDir()
	badPolicy := filepath.Join(dir, "bad-policy.toml")
	os.WriteFile(badPolicy, []byte("default = \"perhaps\"\n"), 0o600)
	goodPolicy := filepath.Join(dir, "policy.toml")
	os.WriteFile(goodPolicy, []byte("default = \"allow\"\n"), 0o600)
	tests := []struct {
		name, body string
		args       []string
		code       int
		out        string // on stdout (ok) or stderr (not ok)
	}{
		{name: "good", body: "listen = \"127.0.0.1:7171\"\npolicy = \"" + goodPolicy + "\"\n[[template]]\nname = \"py\"\n", out: "ok (listen 127.0.0.1:7171, state dir /var/lib/airlock, templates py)"},
		{name: "flags win", body: "listen = \"127.0.0.1:7171\"\n", args: []string{"--listen", "127.0.0.1:9"}, out: "listen 127.0.0.1:9"},
		{name: "empty file", body: "", out: "templates default"},
		{name: "typo", body: "\n[[template]]\nname = \"py\"\ncpu = 1\n", code: cli.ExitAirlock, out: ":4: template.cpu: unknown key \"cpu\"; did you mean \"cpus\"?"},
		{name: "syntax", body: "listen = 127.0.0.1:7070\n", code: cli.ExitAirlock, out: ":1: not valid TOML"},
		{name: "unknown driver", body: "drivers = [\"native\",\n \"gviser\"]\n", code: cli.ExitAirlock, out: ":1: drivers: no driver \"gviser\""},
		{name: "template driver not offered", body: "drivers = [\"native\"]\n[[template]]\nname = \"g\"\ndriver = \"gvisor\"\n", code: cli.ExitAirlock, out: ":4: template.driver: template \"g\": driver \"gvisor\" is not offered"},
		{name: "template its driver cannot run", body: "[[template]]\nname = \"m\"\nmodule = \"/srv/prog.wasm\"\n", code: cli.ExitAirlock, out: "template: template \"m\": module /srv/prog.wasm: the native driver runs no WebAssembly modules"},
		{name: "docker template without an image", body: "[[template]]\nname = \"d\"\ndriver = \"docker\"\n", code: cli.ExitAirlock, out: "template \"d\": a sandbox without an image: the docker driver needs an image the engine has"},
		{name: "bad policy file", body: "\npolicy = \"" + badPolicy + "\"\n", code: cli.ExitAirlock, out: ":2: policy: "},
		{name: "missing policy file", body: "policy = \"" + filepath.Join(dir, "none.toml") + "\"\n", code: cli.ExitAirlock, out: ":1: policy: "},
		// Security review 2, N7: exports that could write into the
		// snapshot store are refused, a prefix apart is not.
		{name: "exports into the snapshot store", body: "[snapshots]\nstore = \"s3\"\nbucket = \"shared\"\nprefix = \"snap/\"\n[export]\nbuckets = [\"shared\"]\n", code: cli.ExitAirlock, out: "s3://shared/ overlaps the snapshot store (s3://shared/snap/"},
		{name: "exports beside the snapshot store", body: "[snapshots]\nstore = \"s3\"\nbucket = \"shared\"\nprefix = \"snap/\"\n[export]\nbuckets = [\"shared/exports/\"]\n", out: "ok"},
		{name: "bad log format flag", body: "", args: []string{"--log-format", "xml"}, code: cli.ExitAirlock, out: "--log-format \"xml\": use text or json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "config.toml")
			os.WriteFile(p, []byte(tt.body), 0o600)
			o := airlockRun(t, invocation{args: append([]string{"serve", "--check-config", "--config", p}, tt.args...)})
			got := o.stdout
			if tt.code != 0 {
				got = o.stderr
			}
			if o.code != tt.code || !strings.Contains(got, tt.out) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d and %q", o.code, o.stdout, o.stderr, tt.code, tt.out)
			}
			if tt.code != 0 && len(tt.args) == 0 && !strings.Contains(o.stderr, p+":") {
				t.Errorf("stderr %q does not name the file", o.stderr)
			}
		})
	}
	o := airlockRun(t, invocation{args: []string{"serve", "--check-config"}})
	if o.code != cli.ExitAirlock || !strings.Contains(o.stderr, "--config FILE") {
		t.Fatalf("--check-config without a file: exit %d, %q", o.code, o.stderr)
	}
}

// TestServeFromConfig starts the daemon with nothing but a config file:
// it listens where the file says, keeps its registry where the file says,
// and logs JSON lines to stderr when the file says so (or text when the
// flag says so, which wins).
func TestServeFromConfig(t *testing.T) {
	requireE2E(t)
	for _, tc := range []struct {
		name string
		args []string
		json bool
	}{{name: "json from the file", json: true}, {name: "text from the flag", args: []string{"--log-format", "text"}}} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			cfg := filepath.Join(t.TempDir(), "config.toml")
			os.WriteFile(cfg, []byte("listen = \"127.0.0.1:0\"\nstate_dir = \""+state+"\"\nlog_format = \"json\"\n"), 0o600)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := airlockCmd(ctx, invocation{args: append([]string{"serve", "--config", cfg, "--audit-key", state + ".keys/audit.key"}, tc.args...)})
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			sc := bufio.NewScanner(stderr)
			var addr string
			var lines []string
			for addr == "" && sc.Scan() {
				line := sc.Text()
				lines = append(lines, line)
				var rec map[string]any
				isJSON := json.Unmarshal([]byte(line), &rec) == nil
				if isJSON != tc.json {
					t.Fatalf("log line %q: JSON %v, want %v", line, isJSON, tc.json)
				}
				if tc.json && rec["msg"] == "listening" {
					addr, _ = rec["addr"].(string)
				}
				if m := listenRE.FindStringSubmatch(line); !tc.json && m != nil {
					addr = m[1]
				}
			}
			if addr == "" {
				t.Fatalf("never listened; log:\n%s", strings.Join(lines, "\n"))
			}
			resp, err := http.Get("http://" + addr + "/healthz")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("healthz: %s", resp.Status)
			}
			if _, err := os.Stat(filepath.Join(state, "airlock.db")); err != nil {
				t.Fatalf("the registry is not in the state_dir of the file: %v", err)
			}
			cmd.Process.Signal(syscall.SIGTERM)
			go func() {
				for sc.Scan() {
				}
			}()
			if err := cmd.Wait(); err != nil {
				t.Fatalf("airlock serve after SIGTERM: %v", err)
			}
		})
	}
}
