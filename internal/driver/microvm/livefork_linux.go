package microvm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Live fork: a checkpoint is a pause's save of the machine after which
// the source runs on (its agent takes a new session on the same port); a
// clone is a resume of that image under a new id, whose agent is told a
// host name, machine id and entropy of its own. Each clone loads the
// image into memory of its own: QEMU's migration stream is not a memory
// image that clones could map and share.

var _ sandbox.LiveForker = (*Driver)(nil)

// Checkpoint saves in into dir and lets it run on, as in itself (its
// agent takes a new session on the same port); nil when it was lost on
// the way.
func (d *Driver) Checkpoint(ctx context.Context, in sandbox.Instance, dir string) ([]byte, sandbox.Instance, error) {
	ai, h, err := microHost(in)
	if err != nil {
		return nil, in, err
	}
	st, err := d.save(ctx, h, dir)
	if st.suspended {
		if _, rerr := d.runOn(ctx, ai, h, st.Token); rerr != nil {
			_ = in.Close(context.WithoutCancel(ctx))
			if err == nil {
				err = rerr
			} else {
				err = fmt.Errorf("%w; and the sandbox was lost going on: %w", err, rerr)
			}
			return nil, nil, fmt.Errorf("checkpoint %s: the sandbox was lost: %w", h.spec.ID, err)
		}
	}
	if err != nil {
		return nil, in, fmt.Errorf("checkpoint %s: %w", h.spec.ID, err)
	}
	return mustJSON(st.pausedState), in, nil
}

// Clone starts sandbox spec.ID from the checkpoint in dir: the source's
// machine, its processes and memory, with spec's id as its host name, a
// new machine id and fresh entropy. Spec's limits, when set, must give
// the guest the checkpoint's memory.
func (d *Driver) Clone(ctx context.Context, spec sandbox.Spec, raw []byte, dir string) (sandbox.Instance, error) {
	var st pausedState
	if err := json.Unmarshal(raw, &st); err != nil || st.Token == "" || !sandbox.ValidID(spec.ID) {
		return nil, fmt.Errorf("clone %s: %w: not a checkpoint's state, or no valid id", spec.ID, sandbox.ErrInvalid)
	}
	if spec.Limits == (sandbox.Limits{}) {
		spec.Limits = st.Spec.Limits
	}
	if got := guestMemoryMiB(spec.Limits.MemoryBytes); got != st.MemoryMiB {
		return nil, fmt.Errorf("clone %s: %w: its memory limit makes a %d MiB guest, the checkpoint's is %d MiB", spec.ID, sandbox.ErrInvalid, got, st.MemoryMiB)
	}
	if spec.Image == "" && spec.Root == "" {
		spec.Image, spec.Root = st.Spec.Image, st.Spec.Root
	}
	st.Spec = spec
	h, err := d.load(ctx, st, dir)
	if err != nil {
		return nil, fmt.Errorf("clone %s: %w", spec.ID, err)
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	h.created = time.Now()
	return h.finish(ctx, st, &agent.GuestRefresh{Seed: newSeed(), Hostname: spec.ID, MachineID: hex.EncodeToString(id)}, time.Time{})
}
