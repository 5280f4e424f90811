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

// AgentEnv returns the environment the agent's binary starts with, as an
// agent or as the forker: nothing but one P for the Go runtime from its
// first instruction. The agent's main package sets GOMAXPROCS(1) in its
// init, but the runtime has run with one P per CPU until then, and taking
// the other away hands its cached spans to the central lists: in about
// half of the agents that cost 0.1–0.4 MiB of span sets, never given
// back (docs/decisions.md, 93). The agent's commands never see it: their
// environment is built from the sandbox's and the request's.
func AgentEnv() []string { return []string{"GOMAXPROCS=1"} }
