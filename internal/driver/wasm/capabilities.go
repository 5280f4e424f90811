package wasm

import "github.com/airlock-sandbox/airlock/internal/sandbox"

// capabilities are what a wasm sandbox can do: run python3 and WASI
// modules with the file API; no shell, no background execs, no terminals,
// no egress (WASI preview 1 has no sockets), no host paths. What it lacks
// is refused by sandbox.CheckSpec and CheckExec, with these reasons,
// before the driver sees the request.
var capabilities = sandbox.Capabilities{
	Languages:    []string{"python3"},
	Files:        true,
	PerExecUsage: true,
	Modules:      true,
	Lacks: map[sandbox.Capability]sandbox.Lack{
		sandbox.CapEgress: {Why: "a WebAssembly sandbox has no sockets (WASI preview 1 has none), so nothing in it can reach a proxy",
			Fix: "use --driver native or gvisor for code that needs the network"},
		sandbox.CapHostRoot: {Why: "a WebAssembly sandbox sees only its own /workspace and /tmp",
			Fix: "copy the files in with the file API, or use --driver native"},
		sandbox.CapHostMounts: {Why: "a WebAssembly sandbox sees only its own /workspace and /tmp",
			Fix: "copy the files in with the file API, or use --driver native"},
		sandbox.CapBackground: {Why: "a WebAssembly sandbox runs one program per exec and none outlives its exec",
			Fix: "use --driver native"},
		sandbox.CapPTY: {Why: "WASI preview 1 has no terminals", Fix: "run without a PTY, or use --driver native"},
		sandbox.CapHome: {Why: "a WebAssembly sandbox sees only its own /workspace and /tmp: no agent binds a home",
			Fix: "leave home out and use /workspace, or use --driver native"},
	},
}
