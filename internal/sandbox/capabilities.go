package sandbox

// Capabilities say what a driver's sandboxes can do, so that the
// supervisor, `airlock doctor`, the API and the conformance suite read one
// declaration instead of each keeping a table. The zero value can do
// nothing beyond running a command.
type Capabilities struct {
	// Shell: commands run in a Linux userland with a POSIX shell and the
	// usual tools (sh, coreutils), as programs of their own that fork.
	Shell bool `json:"shell"`
	// Languages are the languages code may be written in ("sh", "bash",
	// "python3"…), as the supervisor turns code into a command.
	Languages []string `json:"languages"`
	// Files: the file API (Instance.Files) works.
	Files bool `json:"files"`
	// Background: an exec may keep running in the background
	// (ExecRequest.Background).
	Background bool `json:"background"`
	// Egress: network mode egress works (the agent's tunnel to the egress
	// proxy).
	Egress bool `json:"egress"`
	// HostMounts: Spec.Root and Spec.Mounts name host paths this driver
	// can show inside.
	HostMounts bool `json:"host_mounts"`
	// CowMounts: Mount.Cow works (internal/cow): the instance is a
	// CowMounter.
	CowMounts bool `json:"cow_mounts"`
	// PerExecUsage: usage (CPU time, peak memory) is counted per exec;
	// otherwise it is what the agent reports, checked against the whole
	// sandbox's counters.
	PerExecUsage bool `json:"per_exec_usage"`
	// PTY: an exec may ask for a terminal.
	PTY bool `json:"pty"`
	// Snapshots: the driver can snapshot and restore a sandbox's files.
	Snapshots bool `json:"snapshots"`
	// SurvivesRestart: a sandbox outlives the process that made it, and a
	// new one reattaches to it (Recoverer).
	SurvivesRestart bool `json:"survives_restart"`
}

// CheckSpec refuses what spec asks for that a driver with c cannot give
// and would otherwise give as something else: a copy-on-write mount made
// into a plain one.
func (c Capabilities) CheckSpec(driver string, spec Spec) error {
	for _, m := range spec.Mounts {
		if m.Cow && !c.CowMounts {
			return &UnsupportedError{What: "cow mount " + m.Target, Why: "the " + driver + " driver cannot make copy-on-write mounts", Fix: "use the native or gvisor driver, or mount it ro"}
		}
	}
	return nil
}
