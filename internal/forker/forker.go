// Package forker starts sandbox agents for a long-lived host process from
// a small one: the agent's binary run once as the forker (Arg), which
// forks and execs each agent on the host's request.
//
// A fork copies the forking process's page tables (Go forks, not vforks,
// when the child gets a user namespace), and a daemon's grow with its
// sandboxes: with thousands live every create paid for them. The forker's
// stay small, so a create costs the same with 10 live sandboxes as with
// thousands (docs/decisions.md, 62).
package forker

// Arg, as the first argument of the agent's binary, makes it the forker:
// it serves requests on descriptor 3 until that closes.
const Arg = "--forker"
