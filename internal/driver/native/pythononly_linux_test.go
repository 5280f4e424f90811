package native

import (
	"context"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
)

// TestConformanceWithoutShell runs the conformance suite the way a driver
// without a shell runs it (the Wasm driver, with a Python built for WASI):
// the native driver dressed as one whose sandboxes run python3 and nothing
// else, with sandboxtest.PythonWorkload. Every case that needs a Linux
// userland, background execs, egress, host mounts or terminals is declared; the rest
// (exec, exit codes, streams, stdin, the environment, the file API and its
// escapes, memory, timeouts, the output limit, no network, no host files)
// must pass on the Python workload alone.
func TestConformanceWithoutShell(t *testing.T) {
	requireNative(t)
	lc := &leakChecker{sandboxes: map[string]sandboxRecord{}}
	unsupported := map[string]string{}
	declare := func(why string, names ...string) {
		for _, n := range names {
			unsupported[n] = why
		}
	}
	declare("it needs a Linux userland with a shell, which a Python-only sandbox does not have",
		"exec/own_signal", "exec/not_executable", "exec/signal_kill", "exec/cancel_frozen_agent",
		"files/ownership", "files/home", "network/none_loopback_only", "limits/fork_bomb", "limits/setsid_survivor",
		"posture/identity", "posture/processes", "posture/mount", "posture/unshare", "posture/ptrace",
		"posture/raw_socket", "posture/hostname", "posture/agent_proc", "posture/no_agent_binary",
		"posture/tiocsti", "posture/nosuid", "posture/no_sys", "posture/read_only_root", "posture/dev",
		"posture/host_identity", "pools/inotify", "pools/aio", "pools/memfd_secret", "pools/pty")
	declare("a Python-only sandbox runs no background execs", "exec/background", "exec/unread_stdin")
	declare("a Python-only sandbox has no egress", "egress/allow_and_refuse", "egress/unread_download", "egress/loopback_clients", "egress/intercept")
	declare("a Python-only sandbox has no terminals (as the Wasm driver's has none)",
		"pty/python_repl", "pty/shell", "pty/own_terminals", "pty/output_limit", "pty/timeout", "pty/owns_its_tree", "pty/resize_without_pty")
	declare("a Python-only sandbox shows no host paths",
		"mounts/read_only", "mounts/writable", "mounts/symlink_refused", "mounts/swap_race",
		"mounts/root", "mounts/root_symlink_refused", "cow/apply", "cow/quota", "cow/hostile")
	declare("the snapshot cases build their workspaces with a shell, which a Python-only sandbox does not have",
		"snapshots/capture_restore", "snapshots/incremental", "snapshots/refuses_special_files", "snapshots/restore_without_room",
		"snapshots/capture_while_writing", "snapshots/agent_killed_during_restore")
	sandboxtest.Run(t, func(t *testing.T) sandbox.Driver {
		return pythonOnly{&recordingDriver{Driver: newDriver(t), lc: lc}}
	}, sandboxtest.Options{
		Unsupported: unsupported,
		Leaks:       lc.check,
		Workload:    sandboxtest.PythonWorkload{},
	})
}

// pythonOnly is a driver whose sandboxes run python3 and nothing else: it
// declares only the file API, and every other command is not found.
type pythonOnly struct{ sandbox.Driver }

func (d pythonOnly) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{Languages: []string{"python3"}, Files: true}
}

func (d pythonOnly) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	in, err := d.Driver.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return pythonOnlyInstance{in}, nil
}

type pythonOnlyInstance struct{ sandbox.Instance }

// Start starts python3; anything else is not found.
func (in pythonOnlyInstance) Start(ctx context.Context, req sandbox.ExecRequest) (sandbox.Process, error) {
	if len(req.Argv) > 0 && req.Argv[0] != "python3" {
		return nil, &sandbox.CommandError{Code: 127, Msg: req.Argv[0] + ": not found: this sandbox runs python3 only"}
	}
	return in.Instance.Start(ctx, req)
}
