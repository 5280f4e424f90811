// Package agentd is airlock's in-sandbox agent: PID 1 of every sandbox that
// runs a Linux userland (cmd/airlock-agent). It builds the sandbox's root
// (or, where a runtime built it, only what lives inside: see
// agent.ContainedConfig), then serves the host over one byte stream with the
// protocol of package agent: it starts commands confined (uid, capabilities,
// no_new_privs, seccomp, Landlock, a cgroup each), streams their output,
// reaps zombies, kills whole process trees, serves the file API inside the
// sandbox's own view, and forwards the egress proxy port.
//
// Only cmd/airlock-agent imports it: nothing of it runs on the host.
package agentd
