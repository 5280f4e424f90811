package microvm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

// The guest's devices, as the initramfs's boot description names them.
const (
	agentPort  = "airlock.agent" // the virtio-serial port the agent talks on
	rootDevice = "/dev/vda"      // the first virtio-blk device: the root
	rootFSType = "ext4"          // built into the cloud kernel: no module
)

// initramfsVersion changes whenever what buildInitramfs writes changes.
const initramfsVersion = 1

// initramfs is the guest's initramfs in the cache.
type initramfs struct {
	Path string
	// Key names its content: the kernel, the agent, the boot description.
	Key string
}

// buildInitramfs returns the initramfs of the guest for kernel k and the
// agent binary at agentPath, building it into the cache unless it is
// there: the agent as /init, the modules the guest needs with the boot
// description that lists them in load order, and /dev/console (the
// kernel gives init its standard streams from it before any device file
// system is mounted). It is an uncompressed cpio archive: the kernel
// unpacks it without a decompressor, which costs more under emulation
// than the copy does.
func buildInitramfs(ctx context.Context, cache string, k *kernel, agentPath string) (*initramfs, error) {
	mods, err := resolveModules(k.ModulesDir(), guestModules)
	if err != nil {
		return nil, err
	}
	boot := agent.GuestBoot{Port: agentPort, RootDevice: rootDevice, RootFS: rootFSType}
	for _, m := range mods {
		boot.Modules = append(boot.Modules, filepath.Base(m))
	}
	// The agent's installed name carries its checksum.
	key := contentKey("initramfs", initramfsVersion, k.Package, k.Version, filepath.Base(agentPath), boot)
	dir, err := cached(ctx, filepath.Join(cache, "initramfs"), key, func(tmp string) error {
		agentBin, err := os.ReadFile(agentPath)
		if err != nil {
			return fmt.Errorf("read the agent: %w", err)
		}
		bootJSON, err := json.Marshal(boot)
		if err != nil {
			return err
		}
		f, err := os.OpenFile(filepath.Join(tmp, "initramfs.cpio"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return err
		}
		bw := bufio.NewWriterSize(f, 1<<20)
		c := newCPIO(bw)
		for _, d := range []string{"dev", "proc", "sys", "tmp", agent.GuestModulesDir} {
			c.Dir(d, 0o755)
		}
		c.CharDev("dev/console", 0o600, 5, 1)
		c.File("init", 0o755, agentBin)
		c.File(agent.GuestBootFile, 0o644, bootJSON)
		for _, m := range mods {
			b, err := os.ReadFile(m)
			if err != nil {
				f.Close()
				return fmt.Errorf("read module %s: %w", filepath.Base(m), err)
			}
			c.File(filepath.Join(agent.GuestModulesDir, filepath.Base(m)), 0o644, b)
		}
		err = c.Close()
		if err == nil {
			err = bw.Flush()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("build the guest's initramfs: %w", err)
	}
	return &initramfs{Path: filepath.Join(dir, "initramfs.cpio"), Key: key}, nil
}

// restoreStub is a kernel and an initramfs for QEMU to load when it
// restores a snapshot: the guest's memory has the real ones already, but
// QEMU loads whatever -kernel names into its own memory (14 MiB of the
// cloud kernel, per machine, for nothing) and must be given one that
// builds the same machine (the same boot ROM). The stub kernel is the real
// one's setup header with no kernel behind it; the stub initramfs is
// empty.
type restoreStub struct {
	Kernel, Initramfs string
}

// buildRestoreStub returns the restore stub of kernel k, building it into
// the cache unless it is there.
func buildRestoreStub(ctx context.Context, cache string, k *kernel) (*restoreStub, error) {
	key := contentKey("restore-stub", initramfsVersion, k.Package, k.Version)
	dir, err := cached(ctx, filepath.Join(cache, "restore-stub"), key, func(tmp string) error {
		b, err := os.ReadFile(k.Vmlinuz())
		if err != nil {
			return err
		}
		// The boot protocol: the setup is (setup_sects + 1) sectors, and
		// the header's magic "HdrS" is at 0x202.
		if len(b) < 0x210 || string(b[0x202:0x206]) != "HdrS" {
			return fmt.Errorf("%s is not a bzImage", k.Vmlinuz())
		}
		sects := int(b[0x1f1])
		if sects == 0 {
			sects = 4
		}
		setup := (sects + 1) * 512
		if setup >= len(b) {
			return fmt.Errorf("%s: its setup is larger than the file", k.Vmlinuz())
		}
		stub := append(append([]byte(nil), b[:setup]...), make([]byte, 4096)...)
		if err := os.WriteFile(filepath.Join(tmp, "kernel"), stub, 0o644); err != nil {
			return err
		}
		var empty bytes.Buffer
		if err := newCPIO(&empty).Close(); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(tmp, "initramfs.cpio"), empty.Bytes(), 0o644)
	})
	if err != nil {
		return nil, fmt.Errorf("build the restore stub: %w", err)
	}
	return &restoreStub{Kernel: filepath.Join(dir, "kernel"), Initramfs: filepath.Join(dir, "initramfs.cpio")}, nil
}
