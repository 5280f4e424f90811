package wasm_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/driver/wasm"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// newTestDriver makes a driver whose state lives in the test's temporary
// directory, with the shared compilation cache.
func newTestDriver(t *testing.T) (*wasm.Driver, string) {
	t.Helper()
	testcap.Require(t, "wasm")
	dir := t.TempDir()
	d, err := wasm.New(wasm.Options{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return d, dir
}

// TestConformance runs the driver conformance suite with the Python
// workload: a wasm sandbox runs python3 and nothing else.
func TestConformance(t *testing.T) {
	unsupported := map[string]string{}
	declare := func(why string, names ...string) {
		for _, n := range names {
			unsupported[n] = why
		}
	}
	declare("it needs a Linux userland with a shell, which a wasm sandbox does not have",
		"exec/own_signal", "exec/not_executable", "exec/signal_kill", "exec/cancel_frozen_agent",
		"files/ownership", "network/none_loopback_only", "limits/fork_bomb", "limits/setsid_survivor",
		"posture/identity", "posture/processes", "posture/mount", "posture/unshare", "posture/ptrace",
		"posture/raw_socket", "posture/hostname", "posture/agent_proc", "posture/no_agent_binary",
		"posture/tiocsti", "posture/nosuid", "posture/no_sys", "posture/read_only_root", "posture/dev",
		"posture/host_identity")
	declare("a wasm sandbox runs no background execs (no processes, no fork)", "exec/background", "exec/unread_stdin")
	declare("a wasm sandbox has no network at all (WASI preview 1 has no sockets), so no egress", "egress/allow_and_refuse", "egress/unread_download", "egress/loopback_clients")
	declare("a wasm sandbox shows no host paths",
		"mounts/read_only", "mounts/writable", "mounts/symlink_refused", "mounts/swap_race",
		"mounts/root", "mounts/root_symlink_refused")
	var dirs []string
	sandboxtest.Run(t, func(t *testing.T) sandbox.Driver {
		d, dir := newTestDriver(t)
		dirs = append(dirs, dir)
		return d
	}, sandboxtest.Options{
		Unsupported: unsupported,
		Workload:    sandboxtest.PythonWorkload{},
		Leaks: func(t *testing.T, id string) {
			for _, d := range dirs {
				if _, err := os.Stat(filepath.Join(d, "wasm", id)); err == nil {
					t.Errorf("sandbox %s left its directory behind", id)
				}
			}
		},
	})
}
