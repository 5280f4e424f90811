package microvm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Live fork: a checkpoint is a pause's save of the machine after which
// the source runs on (its agent takes a new session on the same port); a
// clone is a resume of that image under a new id, whose agent is told a
// host name, machine id and entropy of its own.
//
// Clones share the checkpoint's memory as machines started from a
// template snapshot share its: QEMU's migration stream is not an image
// they could map, so the checkpoint is converted once into the snapshot's
// form. A loader QEMU whose RAM is a memfd it shares (share=on) loads
// the stream (saved without x-ignore-shared, which a shared RAM block
// would refuse), saves its devices alone (x-ignore-shared: the RAM stays
// in the memfd) to dir/devices, and exits; the memfd's pages that are
// not zero go into a sealed memfd (copyRAM, as a snapshot's RAM), and
// each clone starts as a snapshot's machine does: that memfd mapped
// copy-on-write (share=off) and the devices' stream. (A loader's file on
// disk took three times as long; and QEMU 7.2 opens a RAM file for
// writing, so clones cannot be given a file on disk: decision 86.) The driver holds the
// memfd until ReleaseCheckpoint; the clones' QEMUs hold it after that,
// and it is gone with the last of them. A checkpoint that cannot be
// converted (a cold-booted source has no memory backend to load into)
// is loaded whole by each clone, as before.

var (
	_ sandbox.LiveForker         = (*Driver)(nil)
	_ sandbox.CheckpointReleaser = (*Driver)(nil)
)

// forkDevices is a converted checkpoint's devices' state in its
// directory, saved with x-ignore-shared.
const forkDevices = "devices"

// shareForks says checkpoints are converted for clones to share their
// memory (tests compare with the whole image loaded by each clone).
var shareForks = true

// Checkpoint saves in into dir and lets it run on, as in itself (its
// agent takes a new session on the same port); nil when it was lost on
// the way. The saved machine is then converted for its clones to share
// its memory.
func (d *Driver) Checkpoint(ctx context.Context, in sandbox.Instance, dir string) ([]byte, sandbox.Instance, error) {
	ai, h, err := microHost(in)
	if err != nil {
		return nil, in, err
	}
	share := shareForks && h.Restored
	st, err := d.save(ctx, h, dir, share)
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
	if share {
		t0 := time.Now()
		if err := d.shareCheckpoint(ctx, st.pausedState, dir); err != nil {
			// Each clone loads the whole image instead.
			d.rc.Logger.Warn("convert a live fork's checkpoint for its clones to share", "sandbox_id", h.spec.ID, "err", err)
		} else {
			d.rc.Logger.Debug("live fork's checkpoint converted", "sandbox_id", h.spec.ID, "took", time.Since(t0))
		}
	}
	return mustJSON(st.pausedState), in, nil
}

// shareCheckpoint converts the checkpoint st in dir into a snapshot's
// form: its memory in a sealed memfd, which the driver keeps for dir,
// and its devices' state in dir/devices.
func (d *Driver) shareCheckpoint(ctx context.Context, st pausedState, dir string) (err error) {
	dir = filepath.Clean(dir)
	fd, err := unix.MemfdCreate("airlock-microvm-fork", unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("make a memfd for the checkpoint's memory: %w", err)
	}
	ram := os.NewFile(uintptr(fd), "airlock-microvm-fork")
	defer ram.Close()
	if err := ram.Truncate(int64(st.MemoryMiB) << 20); err != nil {
		return err
	}
	// The loader runs as a sandbox of its own: a lock, a uid range and a
	// host cgroup, which its Teardown removes.
	st.Spec = sandbox.Spec{ID: sandbox.NewID()}
	h, err := d.loadFrom(ctx, st, loadHow{Image: filepath.Join(dir, pauseImage), RAM: ram, RAMShared: true, Hold: true})
	if err != nil {
		return fmt.Errorf("load the checkpoint into shared memory: %w", err)
	}
	defer func() { _ = h.Teardown(context.WithoutCancel(ctx)) }() // on the error paths; a second Teardown does nothing
	devs, err := os.OpenFile(filepath.Join(dir, forkDevices), os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer devs.Close()
	sctx, cancel := context.WithTimeout(ctx, migrateTimeout)
	defer cancel()
	if err := d.vmm.Save(sctx, h.vm, devs); err != nil {
		return fmt.Errorf("save the loaded checkpoint's devices: %w", err)
	}
	h.Closing.Store(true) // its end is not a death
	if !h.vm.Kill(10 * time.Second) {
		return errors.New("the checkpoint's loader (QEMU) did not exit after SIGKILL")
	}
	mem, err := copyRAM(ram)
	if err != nil {
		return err
	}
	// The loader's memory is freed before its cgroup goes, which it is
	// charged to.
	ram.Close()
	if err := h.Teardown(context.WithoutCancel(ctx)); err != nil {
		mem.Close()
		return err
	}
	d.mu.Lock()
	old := d.forks[dir]
	d.forks[dir] = mem
	d.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return nil
}

// ReleaseCheckpoint lets go of the memory of the checkpoint in dir: the
// clones that map it keep it, and it is freed with the last of them.
func (d *Driver) ReleaseCheckpoint(dir string) {
	dir = filepath.Clean(dir)
	d.mu.Lock()
	mem := d.forks[dir]
	delete(d.forks, dir)
	d.mu.Unlock()
	if mem != nil {
		mem.Close()
	}
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
	d.mu.Lock()
	mem := d.forks[filepath.Clean(dir)]
	d.mu.Unlock()
	var h *host
	var err error
	if mem != nil {
		// As a snapshot's machine: the memory mapped copy-on-write, the
		// devices' state saved with x-ignore-shared.
		st.Plain = false
		h, err = d.loadFrom(ctx, st, loadHow{Image: filepath.Join(dir, forkDevices), RAM: mem})
	} else {
		h, err = d.load(ctx, st, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("clone %s: %w", spec.ID, err)
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	h.created = time.Now()
	return h.finish(ctx, st, &agent.GuestRefresh{Seed: newSeed(), Hostname: spec.ID, MachineID: hex.EncodeToString(id)}, time.Time{})
}
