package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/hostlock"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Live fork: `runsc checkpoint --leave-running` saves the sandbox as a
// pause does and lets it run on; each clone is `runsc restore` of that
// image under its own id, on a bundle of its own (the source's OCI spec,
// its root, session directory and cgroup made anew). The host's session
// socket is let go around the checkpoint as for a pause. A clone takes
// an identity of its own before its agent listens again (agent.Identity):
// its id as host name, a new /etc/machine-id. Randomness needs nothing:
// gVisor's getrandom and /dev/urandom read the host's, never a state in
// the image.

var _ sandbox.LiveForker = (*Driver)(nil)

// cloneState is what Clone needs of a checkpoint.
type cloneState struct {
	Spec sandbox.Spec `json:"spec"`
	// OCI is the source's OCI spec (config.json).
	OCI json.RawMessage `json:"oci"`
}

// Checkpoint saves the persistent sandbox in into dir and leaves it
// running, as the instance returned (the host's session is made anew).
// Refused as Pause refuses.
func (d *Driver) Checkpoint(ctx context.Context, in sandbox.Instance, dir string) (_ []byte, _ sandbox.Instance, err error) {
	ai, ok := in.(*agentdriver.Instance)
	if !ok {
		return nil, in, fmt.Errorf("checkpoint %s: %w: not a running gVisor sandbox of this airlock", in.ID(), sandbox.ErrUnsupported)
	}
	h, ok := ai.Host().(*host)
	if !ok {
		return nil, in, fmt.Errorf("checkpoint %s: %w: not a gVisor sandbox", in.ID(), sandbox.ErrUnsupported)
	}
	spec := h.spec
	switch {
	case !h.persistent:
		return nil, in, &sandbox.UnsupportedError{What: "a live fork", Why: "this sandbox dies with the process that made it (a one-shot run's)", Fix: "fork sandboxes of `airlock serve`"}
	case spec.Root != "" || len(spec.Mounts) > 0:
		return nil, in, &sandbox.UnsupportedError{What: "a live fork", Why: "a gVisor sandbox with a host root or host mounts cannot be forked live yet: its mounts are not kept for the clones", Fix: "copy the files in with the file API, or fork from a snapshot of its files"}
	}
	oci, err := os.ReadFile(filepath.Join(h.bundle, "config.json"))
	if err != nil {
		return nil, in, fmt.Errorf("checkpoint %s: %w", spec.ID, err)
	}
	raw, err := h.DriverState()
	if err != nil {
		return nil, in, err
	}
	if err := ai.Detach(ctx); err != nil {
		return nil, in, err
	}
	// From here on the sandbox runs without this process: whatever
	// happens, the agent listens again and this process reattaches.
	var cause error
	if _, err := d.runscCmd(10*time.Second, "kill", spec.ID, signalName(agent.SuspendSignal)); err != nil {
		cause = err
	} else if err := awaitGone(ctx, h.sockPath(), 10*time.Second); err != nil {
		cause = err
	} else if _, err := d.runscCmd(checkpointTimeout, "checkpoint", "--leave-running", "--image-path="+dir, spec.ID); err != nil {
		cause = err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_, _ = d.runscCmd(10*time.Second, "kill", spec.ID, signalName(agent.ResumeSignal))
	again, rerr := d.Recover(rctx, spec.ID, raw)
	switch {
	case rerr != nil && cause != nil:
		return nil, nil, fmt.Errorf("checkpoint %s: %w; and the sandbox was lost reattaching to it: %w", spec.ID, cause, rerr)
	case rerr != nil:
		return nil, nil, fmt.Errorf("checkpoint %s: the sandbox was lost reattaching to it: %w", spec.ID, rerr)
	case cause != nil:
		return nil, again, fmt.Errorf("checkpoint %s: %w", spec.ID, cause)
	}
	return mustJSON(cloneState{Spec: spec, OCI: oci}), again, nil
}

// Clone restores a new sandbox, spec.ID, from the checkpoint in dir: a
// bundle of its own with the source's OCI spec (its root, session
// directory and cgroup its own), `runsc restore` in a new host cgroup,
// and the agent given the clone's identity before it listens again.
func (d *Driver) Clone(ctx context.Context, spec sandbox.Spec, raw []byte, dir string) (_ sandbox.Instance, err error) {
	var st cloneState
	if err := json.Unmarshal(raw, &st); err != nil || len(st.OCI) == 0 {
		return nil, fmt.Errorf("clone %s: %w: the checkpoint's state is not a gVisor one", spec.ID, sandbox.ErrInvalid)
	}
	if !sandbox.ValidID(spec.ID) {
		return nil, fmt.Errorf("clone %q: %w", spec.ID, sandbox.ErrInvalid)
	}
	if !d.rc.Persistent {
		return nil, &sandbox.UnsupportedError{What: "a live fork", Why: "this gVisor driver's sandboxes die with the process that made them", Fix: "fork sandboxes of `airlock serve`"}
	}
	// The image holds the source's sandbox: its limits and mounts are the
	// clone's whatever spec says.
	src := st.Spec
	spec.Limits, spec.Root, spec.Mounts, spec.Image = src.Limits, src.Root, src.Mounts, src.Image
	hostLayers, err := d.layers(spec.AllowDegraded)
	if err != nil {
		return nil, err
	}
	lock, err := hostlock.Sandbox(d.rc.StateDir, spec.ID)
	if err != nil {
		return nil, fmt.Errorf("clone %s: %w", spec.ID, err)
	}
	bundle := filepath.Join(d.bundlesDir(), spec.ID)
	h := &host{
		d: d, spec: spec, lock: lock, bundle: bundle, persistent: true, created: time.Now(),
		session: filepath.Join(bundle, "session"), logPath: filepath.Join(bundle, "log"),
	}
	defer func() {
		if err != nil {
			if h.cmd != nil {
				_ = h.cmd.Process.Kill()
				h.waitDone(10 * time.Second)
			}
			h.teardown()
		}
	}()
	if err := d.cloneBundle(h, st.OCI, false); err != nil {
		return nil, err
	}
	hl := hostLimitsFor(spec.Limits, d.swap)
	if d.hier != nil {
		if err := h.makeCgroup(hl); err != nil {
			return nil, err
		}
	}
	// The agent reads its identity as it listens again (agent.Identity).
	id := agent.Identity{Hostname: cloneHostname(spec.ID), MachineID: newMachineID()}
	if err := os.WriteFile(filepath.Join(h.session, agent.IdentityFile), mustJSON(id), 0o600); err != nil {
		return nil, fmt.Errorf("clone %s: %w", spec.ID, err)
	}
	if err := h.restore(ctx, dir); err != nil {
		return nil, err
	}
	client, agentLayers, err := h.rejoin(ctx)
	if err != nil {
		return nil, h.startError(err)
	}
	if err := checkIdentity(h.session); err != nil {
		client.Close()
		return nil, fmt.Errorf("clone %s: %w", spec.ID, err)
	}
	if err := h.limitCPU(hl); err != nil {
		client.Close()
		return nil, err
	}
	return agentdriver.NewReattached(agentdriver.Config{
		Spec: spec, Client: client, Layers: append(hostLayers, agentLayers...), Host: h, Logger: d.rc.Logger,
	}, d.rc.Egress, h.created)
}

// cloneBundle makes h's bundle from the OCI spec of another sandbox:
// the same mounts, with the root and the session directory in h's bundle
// and h's own cgroup. moved: the spec is of a sandbox paused by another
// daemon (perhaps on another host of the same kind), whose /etc snapshot
// and agent binary are this driver's own, which must be the same.
func (d *Driver) cloneBundle(h *host, raw []byte, moved bool) error {
	var s specs.Spec
	if err := json.Unmarshal(raw, &s); err != nil || s.Root == nil || s.Linux == nil {
		return fmt.Errorf("clone %s: the source's OCI spec cannot be read: %w", h.spec.ID, errors.Join(err, sandbox.ErrInvalid))
	}
	srcBundle := filepath.Dir(s.Root.Path)
	var etc string
	for i, m := range s.Mounts {
		switch {
		case m.Destination == "/etc":
			etc = m.Source
			if moved {
				mine, err := d.etcSnapshot()
				if err != nil {
					return err
				}
				if filepath.Base(mine) != filepath.Base(etc) {
					return &sandbox.UnsupportedError{What: "resume", Why: "this host's /etc (the files sandboxes see) differs from the one of the host that paused the sandbox", Fix: "resume it on a host with the same /etc, or on the one that paused it"}
				}
				etc, s.Mounts[i].Source = mine, mine
			}
		case m.Destination == sessionDir:
			s.Mounts[i].Source = h.session
		case moved && m.Destination == path.Join(agentDir, agentName):
			s.Mounts[i].Source = d.rc.Agent
		case strings.HasPrefix(m.Source, srcBundle+"/"):
			return fmt.Errorf("clone %s: %w: the source's mount at %s is its own", h.spec.ID, sandbox.ErrUnsupported, m.Destination)
		}
	}
	if etc == "" || filepath.Base(s.Root.Path) != "rootfs" {
		return fmt.Errorf("clone %s: %w: the source's root is not a composed one", h.spec.ID, sandbox.ErrUnsupported)
	}
	s.Root.Path = filepath.Join(h.bundle, "rootfs")
	if s.Linux.CgroupsPath != "" {
		s.Linux.CgroupsPath = cgroupsPath(d.rc.CgroupParent, h.spec.ID)
	}
	if err := os.MkdirAll(d.bundlesDir(), 0o700); err != nil {
		return fmt.Errorf("make the bundle directory: %w", err)
	}
	if err := os.Mkdir(h.bundle, 0o700); err != nil {
		return fmt.Errorf("make the bundle of %s: %w", h.spec.ID, err)
	}
	if err := os.Mkdir(h.session, 0o700); err != nil {
		return fmt.Errorf("make the session directory of %s: %w", h.spec.ID, err)
	}
	if _, err := composeRoot(s.Root.Path, etc); err != nil {
		return err
	}
	return writeSpec(filepath.Join(h.bundle, "config.json"), &s)
}

// checkIdentity fails when the clone's agent did not take its identity.
func checkIdentity(session string) error {
	if b, err := os.ReadFile(filepath.Join(session, agent.IdentityErrFile)); err == nil {
		return fmt.Errorf("the clone did not take an identity of its own: %s", b)
	}
	if _, err := os.Stat(filepath.Join(session, agent.IdentityFile)); err == nil {
		return errors.New("the clone's agent did not read its identity (an agent older than live fork?)")
	}
	return nil
}

// cloneHostname is a clone's host name: its id, at most 63 bytes.
func cloneHostname(id string) string {
	if len(id) > 63 {
		id = id[:63]
	}
	return id
}
