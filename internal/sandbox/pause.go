package sandbox

import "context"

// Pausing a sandbox with its memory (Capabilities.Pause): a driver whose
// sandboxes' processes and memory can be saved to the host's disk and
// brought back is a Pauser; one that can only stop them where they are
// (a freezer: the CPU stops, the memory stays the host's) has instances
// that are Freezers, and declares Capabilities.MemoryKeptInHost.

// Pauser is a driver that can save a running sandbox, its processes,
// their memory and its files, to a directory of the host's and end it,
// and later bring it back from there where it stopped.
type Pauser interface {
	// Pause saves in into dir, which exists and is empty, and ends in:
	// afterwards the sandbox holds no process, memory or CPU on the host,
	// only dir and what its driver keeps for it (its root; a
	// PauseSettler's once SettlePause returned). It returns
	// the state Resume takes. On an error the sandbox runs on, as the
	// returned Instance (in itself, or in reattached); nil means it was
	// lost on the way.
	Pause(ctx context.Context, in Instance, dir string) ([]byte, Instance, error)
	// Resume brings sandbox id back from dir and state (Pause's) running:
	// its processes, their memory and open files as they were; its
	// connections to the outside closed. An error leaves dir and state
	// as they were, to try again or Discard.
	Resume(ctx context.Context, id string, state []byte, dir string) (Instance, error)
	// Discard removes what the driver keeps of paused sandbox id (not
	// dir): it will not be resumed.
	Discard(ctx context.Context, id string, state []byte) error
}

// PauseSettler is a Pauser whose Pause returns as soon as the image is
// written, while what the sandbox held on the host (its processes, their
// memory, its cgroups) is still being released: SettlePause waits until it
// is, and the caller calls it before it takes the pause as done (the
// image's digests can be taken meanwhile). The driver's Resume and Discard
// of the sandbox wait for it too.
type PauseSettler interface {
	SettlePause(id string)
}

// PauseFinder is a Pauser that can tell, for a sandbox whose pause the
// process that began it did not see through (it died), whether the
// sandbox was saved after all.
type PauseFinder interface {
	// Paused returns the state Resume takes and true when sandbox id,
	// whose reattach state is state, was saved by a pause and no longer
	// runs (what it left running on the host is removed); false when it
	// was not (it may run on: Recoverer.Recover reattaches to it).
	Paused(ctx context.Context, id string, state []byte) ([]byte, bool)
}

// LiveForker is a Pauser that can also copy a running sandbox
// (Capabilities.LiveFork): the source is saved without being ended, and
// any number of new sandboxes start from that image, each running on
// from the source's processes and memory with an identity of its own.
type LiveForker interface {
	// Checkpoint saves in's processes, their memory and its files into
	// dir, which exists and is empty, and leaves the sandbox running (it
	// stops no longer than the save takes). It returns the state Clone
	// takes, and the Instance the sandbox runs on afterwards, on an error
	// too: in itself, or a reattached one (a driver whose host session
	// cannot be saved lets go of it around the save, as Pause does); nil
	// means it was lost on the way.
	Checkpoint(ctx context.Context, in Instance, dir string) ([]byte, Instance, error)
	// Clone starts a new sandbox as spec says (spec.ID is its id; its
	// host name, machine id and random seed are its own, never the
	// source's) from dir and state (Checkpoint's), running where the
	// source was. dir is only read, and several clones of one image may
	// run at once (sharing its memory image where the driver can).
	Clone(ctx context.Context, spec Spec, state []byte, dir string) (Instance, error)
}

// CheckpointReleaser is a LiveForker that keeps something of a
// checkpoint outside its directory for its clones to share (the microVM
// driver: the memory they map); ReleaseCheckpoint is called once every
// clone of the checkpoint in dir has started or failed, before dir is
// removed.
type CheckpointReleaser interface {
	ReleaseCheckpoint(dir string)
}

// Freezer is an instance that can stop every process of its sandbox where
// it is (its memory stays on the host) and let it go on.
type Freezer interface {
	Freeze(ctx context.Context) error
	Thaw(ctx context.Context) error
}

// CheckPause refuses a pause on a driver with c,
// with the driver's reason. The error wraps ErrUnsupported.
func (c Capabilities) CheckPause(driver string) error {
	if !c.Pause {
		return c.refuse(driver, CapPause, "pause")
	}
	return nil
}

// CheckLiveFork refuses a live fork on a driver with c. The error wraps
// ErrUnsupported.
func (c Capabilities) CheckLiveFork(driver string) error {
	if !c.LiveFork {
		return c.refuse(driver, CapLiveFork, "a live fork")
	}
	return nil
}
