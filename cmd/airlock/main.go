//go:build front

package main

import (
	"slices"

	"github.com/airlock-sandbox/airlock/internal/fullbin"
)

// This is the airlock front (docs/decisions.md): built with -tags front, it
// has only `run` on the native and gVisor drivers and --version, and hands
// everything else to the complete airlock it embeds (internal/fullbin).

func init() { handOff = fullbin.Exec }

// frontDoes says whether the front runs args itself: `run` (which may
// still hand off: runHandsOff) and the version.
func frontDoes(args []string) bool {
	return len(args) > 0 && (args[0] == "run" || (len(args) == 1 && slices.Contains([]string{"--version", "-v"}, args[0])))
}
