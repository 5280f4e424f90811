package microvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/hostlock"
)

// snapshotVersion changes whenever what makeSnapshot saves changes.
const snapshotVersion = 1

// shape is what a machine is booted with: everything its snapshot depends
// on.
type shape struct {
	Accel     string
	VCPUs     int
	MemoryMiB int
	Kernel    *kernel
	Initramfs *initramfs
	Root      *rootImage
	Cmdline   string
}

// key names the snapshot of s booted by v.
func (s shape) key(v vmm) string {
	return contentKey("snapshot", snapshotVersion, v.Name(), s.Accel, s.VCPUs, s.MemoryMiB,
		s.Kernel.Package, s.Kernel.Version, s.Initramfs.Key, s.Root.Key, s.Cmdline)
}

// machine returns a machine of shape s (to which the caller adds its RAM,
// state, user, cgroup and console).
func (s shape) machine() *machine {
	return &machine{
		Accel: s.Accel, VCPUs: s.VCPUs, MemoryMiB: s.MemoryMiB,
		Kernel: s.Kernel.Vmlinuz(), Initramfs: s.Initramfs.Path, Cmdline: s.Cmdline, RootImage: s.Root.Path,
	}
}

// snapshot is a saved machine, ready to restore.
type snapshot struct {
	Key string
	// RAM is the machine's memory, loaded into a sealed memfd: machines map
	// it copy-on-write and can never change it (QEMU 7.2 opens its RAM
	// file for writing even when it maps it privately, so the cache's file
	// itself is never given to it).
	RAM *os.File
	// State is the file of the saved device state.
	State string
	// Stub is what QEMU loads as the kernel and initramfs of a restored
	// machine.
	Stub *restoreStub
}

// snapshotMeta is what a snapshot's directory records about it.
type snapshotMeta struct {
	Key       string    `json:"key"`
	VMM       string    `json:"vmm"`
	Accel     string    `json:"accel"`
	VCPUs     int       `json:"vcpus"`
	MemoryMiB int       `json:"memory_mib"`
	Kernel    string    `json:"kernel"`
	Initramfs string    `json:"initramfs"`
	Root      string    `json:"root"`
	Cmdline   string    `json:"cmdline"`
	BootMS    int64     `json:"boot_ms"`
	Made      time.Time `json:"made"`
}

// snapshotFor returns the snapshot of s: loaded already, or from the cache,
// or made now (a cold boot, then a save) and cached.
func (d *Driver) snapshotFor(ctx context.Context, s shape) (*snapshot, error) {
	key := s.key(d.vmm)
	d.mu.Lock()
	snap := d.snaps[key]
	d.mu.Unlock()
	if snap != nil {
		return snap, nil
	}
	dir, err := cached(ctx, filepath.Join(d.cache, "snapshot"), key, func(tmp string) error {
		return d.makeSnapshot(ctx, s, key, tmp)
	})
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if snap := d.snaps[key]; snap != nil {
		return snap, nil
	}
	stub, err := buildRestoreStub(ctx, d.cache, s.Kernel)
	if err != nil {
		return nil, err
	}
	ram, err := loadRAM(filepath.Join(dir, "ram"))
	if err != nil {
		return nil, err
	}
	snap = &snapshot{Key: key, RAM: ram, State: filepath.Join(dir, "state"), Stub: stub}
	d.snaps[key] = snap
	return snap, nil
}

// makeSnapshot boots a machine of shape s whose RAM is the file dir/ram,
// waits until its agent waits for a config, and saves its device state to
// dir/state.
func (d *Driver) makeSnapshot(ctx context.Context, s shape, key, dir string) error {
	start := time.Now()
	d.rc.Logger.Info("making a microVM snapshot", "key", key, "memory_mib", s.MemoryMiB, "vcpus", s.VCPUs, "accel", s.Accel)
	lock, uid, err := hostlock.UIDRange(d.rc.StateDir)
	if err != nil {
		return err
	}
	defer lock.Drop()
	ramPath := filepath.Join(dir, "ram")
	ram, err := os.OpenFile(ramPath, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer ram.Close()
	if err := ram.Truncate(int64(s.MemoryMiB) << 20); err != nil {
		return err
	}
	// QEMU runs as uid and opens the file again (/dev/fd/N) to map it.
	if err := ram.Chown(uid, uid); err != nil {
		return err
	}
	m := s.machine()
	m.RAM, m.RAMShared = ram, true
	// Booted to be saved: the guest warms its page cache first.
	m.Cmdline = strings.Replace(m.Cmdline, " -- ", " "+agent.GuestWarmEnv+"=1 -- ", 1)
	m.UID, m.GID, m.Groups = uid, uid, d.vmGroups()
	v, _, err := d.boot(ctx, m)
	if err != nil {
		return err
	}
	defer v.Kill(10 * time.Second)
	boot := time.Since(start)
	state, err := os.OpenFile(filepath.Join(dir, "state"), os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer state.Close()
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := d.vmm.Save(sctx, v, state); err != nil {
		return fmt.Errorf("save the booted microVM: %w", err)
	}
	if !v.Kill(10 * time.Second) {
		return errors.New("save the booted microVM: QEMU did not exit after SIGKILL")
	}
	for _, f := range []*os.File{ram, state} {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	if err := ram.Chown(0, 0); err != nil {
		return err
	}
	meta := snapshotMeta{
		Key: key, VMM: d.vmm.Name(), Accel: s.Accel, VCPUs: s.VCPUs, MemoryMiB: s.MemoryMiB,
		Kernel: s.Kernel.Package + " " + s.Kernel.Version, Initramfs: s.Initramfs.Key, Root: s.Root.Key,
		Cmdline: s.Cmdline, BootMS: boot.Milliseconds(), Made: time.Now().UTC().Truncate(time.Second),
	}
	b, _ := json.MarshalIndent(meta, "", "  ")
	d.rc.Logger.Info("made a microVM snapshot", "key", key, "took", time.Since(start).Round(time.Millisecond))
	return os.WriteFile(filepath.Join(dir, "snapshot.json"), b, 0o644)
}

// boot starts m and waits until its guest is ready, trying again when a
// boot hangs (emulated machines on a loaded host now and then do). It
// returns the machine and the console of its boot.
func (d *Driver) boot(ctx context.Context, m *machine) (*vm, *agentdriver.LogBuffer, error) {
	d.accelerator() // settles the boot timeout
	var errs []string
	var console *agentdriver.LogBuffer
	attempts := d.opts.BootAttempts
	for attempt := 1; attempt <= attempts; attempt++ {
		console = &agentdriver.LogBuffer{}
		m.Console = console
		v, err := d.vmm.Start(ctx, m)
		if err == nil {
			if err = v.waitReady(ctx, d.opts.BootTimeout); err == nil {
				return v, console, nil
			}
			v.Kill(10 * time.Second)
		}
		errs = append(errs, fmt.Sprintf("attempt %d: %v", attempt, err))
		if !errors.Is(err, errBootTimeout) || ctx.Err() != nil {
			break
		}
		if attempt < attempts {
			d.rc.Logger.Warn("a microVM boot hung; trying again", "attempt", attempt, "timeout", d.opts.BootTimeout)
		}
	}
	return nil, console, fmt.Errorf("the microVM did not boot (%s)%s", strings.Join(errs, "; "), consoleTail(console))
}

// consoleTail is what a machine printed, for an error message.
func consoleTail(b *agentdriver.LogBuffer) string {
	if b == nil {
		return ""
	}
	s := strings.TrimSpace(string(b.Bytes()))
	if s == "" {
		return "; its console printed nothing"
	}
	const keep = 1500
	if len(s) > keep {
		s = "…" + s[len(s)-keep:]
	}
	return "; its console printed: " + s
}

// loadRAM copies a snapshot's RAM file into a sealed memfd. Only the
// file's data is copied, and of it only the pages that are not zero: the
// rest reads as zero from a hole, and takes no memory until a machine
// writes it (in its own copy).
func loadRAM(path string) (*os.File, error) {
	src, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open the snapshot's memory: %w", err)
	}
	defer src.Close()
	return copyRAM(src)
}

// copyRAM copies the pages of src that are not zero into a sealed memfd,
// as loadRAM does.
func copyRAM(src *os.File) (*os.File, error) {
	fi, err := src.Stat()
	if err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate("airlock-microvm-ram", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("make a memfd for the snapshot's memory: %w", err)
	}
	mem := os.NewFile(uintptr(fd), "airlock-microvm-ram")
	ok := false
	defer func() {
		if !ok {
			mem.Close()
		}
	}()
	if err := mem.Truncate(fi.Size()); err != nil {
		return nil, err
	}
	const page = 4096
	buf := make([]byte, 1<<20)
	zero := make([]byte, page)
	for off := int64(0); off < fi.Size(); {
		data, err := unix.Seek(int(src.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read the snapshot's memory: %w", err)
		}
		hole, err := unix.Seek(int(src.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return nil, fmt.Errorf("read the snapshot's memory: %w", err)
		}
		for pos := data; pos < hole; {
			n, err := src.ReadAt(buf[:min(int64(len(buf)), hole-pos)], pos)
			if n == 0 && err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("read the snapshot's memory: %w", err)
			}
			for i := 0; i < n; i += page {
				p := buf[i:min(i+page, n)]
				if string(p) == string(zero[:len(p)]) {
					continue
				}
				if _, err := mem.WriteAt(p, pos+int64(i)); err != nil {
					return nil, fmt.Errorf("load the snapshot's memory: %w", err)
				}
			}
			pos += int64(n)
		}
		off = hole
	}
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(mem.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		return nil, fmt.Errorf("seal the snapshot's memory: %w", err)
	}
	ok = true
	return mem, nil
}
