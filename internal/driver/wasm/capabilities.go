package wasm

import "github.com/airlock-sandbox/airlock/internal/sandbox"

// capabilities are what a wasm sandbox can do: run python3 (and WASI
// modules) with the file API; no shell, no background execs, no egress
// (WASI preview 1 has no sockets), no host mounts.
var capabilities = sandbox.Capabilities{
	Languages:    []string{"python3"},
	Files:        true,
	PerExecUsage: true,
}
