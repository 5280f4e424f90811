// Command airlock-full is the complete airlock: every command and every
// driver. The front (cmd/airlock) runs it for what it does not do itself;
// it runs on its own as well.
//
//	airlock run [flags] -- CMD [ARGS...]   one command in a fresh sandbox
//	airlock serve                          the daemon
//	airlock doctor [--json]                what this host can run, and fixes
//	airlock microvm prepare                what the microvm driver needs
//	airlock image pull|load|ls|rm          the image cache of --image
package main

import (
	"github.com/airlock-sandbox/airlock/internal/cli"
	// Policies with rules and tiers: CEL.
	_ "github.com/airlock-sandbox/airlock/internal/policy/celrules"
)

func main() { cli.Main() }
