// Command airlock is the airlock front (docs/decisions.md, 47): `airlock
// run` on the native and gVisor drivers, and `--version`, in a small
// program that starts fast. Everything else it hands to the complete
// airlock (cmd/airlock-full): the one installed beside it, else the copy
// it embeds (internal/fullbin).
//
//	airlock run [flags] -- CMD [ARGS...]   one command in a fresh sandbox
//	airlock doctor [--json]                what this host can run, and fixes
package main

import (
	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/fullbin"
)

func main() {
	cli.HandOffTo(fullbin.Exec)
	cli.Main()
}
