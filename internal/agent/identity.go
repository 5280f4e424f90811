package agent

// Identity is what a sandbox restored as a copy of another (a live
// fork's clone) takes on instead of its source's: the host writes it to
// IdentityFile in the session directory before it sends ResumeSignal, and
// the agent sets the host name, rewrites its /etc/machine-id,
// /etc/hostname and /etc/hosts (ContainedConfig.MachineID) and removes
// the file before it listens again. When it cannot, it writes why to
// IdentityErrFile instead, and listens all the same: the host reads it
// and ends the clone.
type Identity struct {
	Hostname  string `json:"hostname"`
	MachineID string `json:"machine_id"`
}

// The files of Identity in the session directory.
const (
	IdentityFile    = "identity.json"
	IdentityErrFile = "identity.err"
)
