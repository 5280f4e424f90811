package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// TestE2EGVisor runs the airlock binary with --driver gvisor.
func TestE2EGVisor(t *testing.T) {
	requireE2E(t)
	testcap.Require(t, "runsc")
	t.Run("exit code and streams", func(t *testing.T) {
		o := airlockRun(t, runArgs("--driver", "gvisor", "--", "sh", "-c", "echo out; echo err >&2; exit 3"))
		if o.code != 3 || o.stdout != "out\n" || o.stderr != "err\n" {
			t.Errorf("got code %d, stdout %q, stderr %q; want 3, out, err", o.code, o.stdout, o.stderr)
		}
	})
	t.Run("json layers", func(t *testing.T) {
		o := airlockRun(t, runArgs("--driver", "gvisor", "--json", "--", "python3", "-c", "print(1)"))
		var out struct {
			ExitCode int      `json:"exit_code"`
			Stdout   string   `json:"stdout"`
			Layers   []string `json:"layers"`
		}
		if err := json.Unmarshal([]byte(o.stdout), &out); err != nil {
			t.Fatalf("decode %q: %v", o.stdout, err)
		}
		if out.ExitCode != 0 || out.Stdout != "1\n" {
			t.Errorf("python3 print(1): %+v", out)
		}
		for _, want := range []string{"gvisor", "seccomp", "no_new_privs", "capabilities", "cgroups"} {
			if !slices.Contains(out.Layers, want) {
				t.Errorf("layers %q lack %s", out.Layers, want)
			}
		}
		if slices.Contains(out.Layers, "landlock") {
			t.Errorf("layers %q claim Landlock, which gVisor has not", out.Layers)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		o := airlockRun(t, runArgs("--driver", "gvisor", "--timeout", "1s", "--", "sleep", "5"))
		if o.code != 137 || !strings.Contains(o.stderr, "timed out") {
			t.Errorf("code %d, stderr %q; want 137 and a timeout message", o.code, o.stderr)
		}
	})
}
