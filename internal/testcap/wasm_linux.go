package testcap

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/driver/wasm"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// probeWasm checks that the wasm driver runs Python here: python.wasm is
// installed, compiles, and prints 1 in a sandbox.
func probeWasm(ctx context.Context) Result {
	fix := "make wasm-python (or set AIRLOCK_WASM_PYTHON to a CPython built for WASI)"
	d, err := wasm.New(wasm.Options{})
	if err != nil {
		return fail(err.Error(), fix)
	}
	if err := d.Probe(ctx); err != nil {
		return fail(err.Error(), "")
	}
	if err := d.Python(ctx); err != nil {
		return fail(err.Error(), fix)
	}
	sb, err := d.Create(ctx, sandbox.Spec{})
	if err != nil {
		return fail(fmt.Sprintf("create a wasm sandbox: %v", err), "")
	}
	defer sb.Close(context.WithoutCancel(ctx))
	var out bytes.Buffer
	res, err := sandbox.Run(ctx, sb, sandbox.ExecRequest{Argv: []string{"python3", "-c", "print(1)"}, Stdout: &out})
	if err != nil || res.ExitCode != 0 || out.String() != "1\n" {
		return fail(fmt.Sprintf("python3 -c 'print(1)' in a wasm sandbox: %v, exit %d (%s), printed %q", err, res.ExitCode, strings.TrimSpace(res.Message), out.String()), fix)
	}
	return ok("python.wasm " + wasm.PythonPath())
}
