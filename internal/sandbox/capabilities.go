package sandbox

import "fmt"

// Capabilities say what a driver's sandboxes can do, so that the
// supervisor, `airlock doctor`, the API and the conformance suite read one
// declaration instead of each keeping a table. The zero value can do
// nothing beyond running a command.
//
// Every field of a Spec or an ExecRequest that a driver may lack maps to
// one capability here, and CheckSpec and CheckExec refuse what the driver
// lacks before any of its code runs: a driver's Create and Start never see
// a request their capabilities refuse.
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
	// HostRoot: Spec.Root, a host directory, can be the sandbox's root
	// (shown read-only, or made into the root's image).
	HostRoot bool `json:"host_root"`
	// HostMounts: Spec.Mounts, host paths shown inside.
	HostMounts bool `json:"host_mounts"`
	// CowMounts: Mount.Cow works (internal/cow): the instance is a
	// CowMounter.
	CowMounts bool `json:"cow_mounts"`
	// Images: the driver runs container images: Spec.Image and
	// Spec.Runtime choose them.
	Images bool `json:"images"`
	// ImageRoot: the driver runs an image from its root unpacked on the
	// host (internal/image's cache), which whoever makes the sandbox
	// pulls and passes as Spec.Root, with Spec.Image naming it (for the
	// audit log). A Spec with an Image and no Root, or with a Runtime, is
	// refused. The image's Env and WorkingDir are the caller's to apply.
	ImageRoot bool `json:"image_root"`
	// NeedsImage: a Spec must name its Image, the driver having no
	// default one.
	NeedsImage bool `json:"needs_image"`
	// Modules: Spec.Module, a WebAssembly module, can be the sandbox's
	// command.
	Modules bool `json:"modules"`
	// PerExecUsage: usage (CPU time, peak memory) is counted per exec;
	// otherwise it is what the agent reports, checked against the whole
	// sandbox's counters.
	PerExecUsage bool `json:"per_exec_usage"`
	// PTY: an exec may ask for a terminal.
	PTY bool `json:"pty"`
	// Snapshots: the driver can snapshot and restore a sandbox's files.
	Snapshots bool `json:"snapshots"`
	// Home: Spec.Home works (the agent binds /workspace there).
	Home bool `json:"home"`
	// SurvivesRestart: a sandbox outlives the process that made it, and a
	// new one reattaches to it (Recoverer).
	SurvivesRestart bool `json:"survives_restart"`
	// Pause: a running sandbox can be paused and resumed where it
	// stopped (a Pauser driver, or Freezer instances where
	// MemoryKeptInHost).
	Pause bool `json:"pause"`
	// MemoryKeptInHost: a paused sandbox's memory stays the host's (a
	// freeze: its CPU stops), not written to disk.
	MemoryKeptInHost bool `json:"memory_kept_in_host"`
	// LiveFork: a running sandbox can be copied, its processes and
	// memory too, into a new one.
	LiveFork bool `json:"live_fork"`
	// Lacks are the driver's own reasons for what it cannot do, and what
	// to do instead, by capability; CheckSpec and CheckExec say them. A
	// capability lacked without a reason here gets a general one.
	Lacks map[Capability]Lack `json:"-"`
}

// Capability names one thing a Spec or an exec may ask of a driver, as
// Capabilities' JSON names it.
type Capability string

// The capabilities CheckSpec and CheckExec check.
const (
	CapHostRoot   Capability = "host_root"
	CapHostMounts Capability = "host_mounts"
	CapCowMounts  Capability = "cow_mounts"
	CapEgress     Capability = "egress"
	CapImages     Capability = "images"
	// CapDefaultImage is lacked by a driver that NeedsImage.
	CapDefaultImage Capability = "default_image"
	CapModules      Capability = "modules"
	CapPTY          Capability = "pty"
	CapBackground   Capability = "background"
	CapHome         Capability = "home"
	CapPause        Capability = "pause"
	CapLiveFork     Capability = "live_fork"
)

// Lack is why a driver cannot do something, and what to do instead, in
// words a person or a model can act on.
type Lack struct {
	Why, Fix string
}

// general are the reasons of a capability lacked by a driver that gives
// none of its own; %s is the driver's name.
var general = map[Capability]Lack{
	CapHostRoot:     {Why: "the %s driver cannot use a host directory as the sandbox's root", Fix: "drop the root (the default root is the host's /usr and an /etc allowlist), or use a driver with host_root (airlock doctor lists them)"},
	CapHostMounts:   {Why: "the %s driver cannot show host paths inside a sandbox", Fix: "copy the files in with the file API, or use a driver with host_mounts (airlock doctor lists them)"},
	CapCowMounts:    {Why: "the %s driver cannot make copy-on-write mounts", Fix: "mount it ro, or use a driver with cow_mounts (airlock doctor lists them)"},
	CapEgress:       {Why: "sandboxes of the %s driver cannot reach the network", Fix: "use network mode none, or a driver with egress (airlock doctor lists them)"},
	CapImages:       {Why: "the %s driver runs no container images: it makes its own root", Fix: "drop the image and runtime, or use a driver with images (airlock doctor lists them)"},
	CapDefaultImage: {Why: "the %s driver has no default image", Fix: "name an image (--image NAME, or image in the template)"},
	CapModules:      {Why: "the %s driver runs no WebAssembly modules", Fix: "use a driver with modules (airlock doctor lists them)"},
	CapPTY:          {Why: "the %s driver has no terminals", Fix: "run the command without a terminal, or in a sandbox of a driver with pty (airlock doctor lists them)"},
	CapBackground:   {Why: "the %s driver runs no command in the background", Fix: "run the command in the foreground, or in a sandbox of a driver with background (airlock doctor lists them)"},
	CapHome:         {Why: "the %s driver has no home directory but /workspace", Fix: "leave home out and use /workspace, or use a driver with home (airlock doctor lists them)"},
	CapPause:        {Why: "the %s driver cannot pause a sandbox with its memory", Fix: "snapshot its files instead (airlock sandbox snapshot), or use a driver with pause (airlock doctor lists them)"},
	CapLiveFork:     {Why: "the %s driver cannot copy a running sandbox's processes", Fix: "fork from a snapshot of its files instead, or use a driver with live_fork (airlock doctor lists them)"},
}

// refuse is the error for something (what) that needs capability cap,
// which driver lacks.
func (c Capabilities) refuse(driver string, cap Capability, what string) error {
	l, ok := c.Lacks[cap]
	if !ok {
		l = general[cap]
		l.Why = fmt.Sprintf(l.Why, driver)
	}
	return &UnsupportedError{What: what, Why: l.Why, Fix: l.Fix}
}

// CheckSpec refuses what spec asks for that a driver with c cannot give,
// with the driver's reason: a host root, host mounts, copy-on-write
// mounts, network egress, an image or a runtime (or none where the driver
// needs one), a module. The error wraps ErrUnsupported.
func (c Capabilities) CheckSpec(driver string, spec Spec) error {
	switch {
	case c.ImageRoot && spec.Runtime != "":
		return &UnsupportedError{What: "runtime " + spec.Runtime,
			Why: fmt.Sprintf("the %s driver runs an image from its unpacked root, on no container runtime", driver),
			Fix: "drop the runtime, or use the docker driver"}
	case c.ImageRoot && spec.Image != "" && spec.Root == "":
		return &UnsupportedError{What: "image " + spec.Image,
			Why: fmt.Sprintf("the %s driver runs an image from its root unpacked into airlock's image cache, and this one was not unpacked for it", driver),
			Fix: "run it with `airlock run --image` (which pulls it), or use the docker driver"}
	case spec.Root != "" && !c.HostRoot:
		return c.refuse(driver, CapHostRoot, "root "+spec.Root)
	case len(spec.Mounts) > 0 && !c.HostMounts:
		return c.refuse(driver, CapHostMounts, "mount "+spec.Mounts[0].String())
	case spec.Network.Mode == NetworkEgress && !c.Egress:
		return c.refuse(driver, CapEgress, "network mode egress")
	case spec.Image != "" && !c.Images:
		return c.refuse(driver, CapImages, "image "+spec.Image)
	case spec.Runtime != "" && !c.Images:
		return c.refuse(driver, CapImages, "runtime "+spec.Runtime)
	case spec.Image == "" && c.Images && c.NeedsImage:
		return c.refuse(driver, CapDefaultImage, "a sandbox without an image")
	case spec.Module != "" && !c.Modules:
		return c.refuse(driver, CapModules, "module "+spec.Module)
	case spec.Home != "" && !c.Home:
		return c.refuse(driver, CapHome, "home "+spec.Home)
	}
	for _, m := range spec.Mounts {
		if m.Cow && !c.CowMounts {
			return c.refuse(driver, CapCowMounts, "cow mount "+m.Target)
		}
	}
	return nil
}

// CheckExec refuses what req asks for that a driver with c cannot give: a
// terminal, a command in the background. The error wraps ErrUnsupported.
func (c Capabilities) CheckExec(driver string, req ExecRequest) error {
	switch {
	case req.PTY != nil && !c.PTY:
		return c.refuse(driver, CapPTY, "a terminal (pty)")
	case req.Background && !c.Background:
		return c.refuse(driver, CapBackground, "a background exec")
	}
	return nil
}
