package agentd

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/rootfs"
)

// A sandbox's own identity files (agent.ContainedConfig.MachineID):
// /etc/machine-id, /etc/hostname and /etc/hosts are binds of files on a
// tiny tmpfs of the agent's, read-only to everybody; the agent keeps them
// open, so that a clone restored from another sandbox's image can take an
// identity of its own (agent.Identity) without a mount of the workload's
// changing.

// identityNames are the files, in /etc, that identity holds.
var identityNames = []string{"machine-id", "hostname", "hosts"}

// identity holds the open files, by name; empty without MachineID.
var identity struct {
	sync.Mutex
	files map[string]*os.File
}

// ownIdentity binds the sandbox's own identity files over the root's.
func ownIdentity(cfg *agent.Config) error {
	g := cfg.Contained
	if g == nil || g.MachineID == "" {
		return nil
	}
	home := g.Home
	if home == "" {
		home = "/tmp"
	}
	dir := home + "/.identity"
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("make the sandbox's identity files: %w", err)
	}
	defer os.Remove(dir)
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=16k,nr_inodes=8,mode=0755"); err != nil {
		return fmt.Errorf("make the sandbox's identity files: %w", err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	identity.Lock()
	defer identity.Unlock()
	identity.files = map[string]*os.File{}
	for _, name := range identityNames {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o444)
		if err != nil {
			return fmt.Errorf("make the sandbox's /etc/%s: %w", name, err)
		}
		identity.files[name] = f
		p := "/etc/" + name
		if err := unix.Mount(f.Name(), p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind the sandbox's own %s: %w", p, err)
		}
		if err := unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("make the sandbox's own %s read-only: %w", p, err)
		}
	}
	return writeOwnIdentity(cfg, agent.Identity{Hostname: cfg.Hostname, MachineID: g.MachineID})
}

// writeOwnIdentity writes id into the identity files. identity is locked.
func writeOwnIdentity(cfg *agent.Config, id agent.Identity) error {
	content := map[string]string{"machine-id": id.MachineID + "\n"}
	etc := rootfs.EtcFiles(cfg.UID, cfg.GID, id.Hostname)
	content["hostname"], content["hosts"] = etc["hostname"], etc["hosts"]
	for _, name := range identityNames {
		f := identity.files[name]
		if err := f.Truncate(0); err != nil {
			return fmt.Errorf("write the sandbox's /etc/%s: %w", name, err)
		}
		if _, err := f.WriteAt([]byte(content[name]), 0); err != nil {
			return fmt.Errorf("write the sandbox's /etc/%s: %w", name, err)
		}
	}
	return nil
}

// takeIdentity takes on the identity the host left in the session
// directory dir (agent.IdentityFile), if any, and removes it; what fails
// is written to agent.IdentityErrFile. It runs before the agent listens
// again, so no command starts meanwhile.
func (s *server) takeIdentity(dir string) {
	file := filepath.Join(dir, agent.IdentityFile)
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err == nil {
		err = s.reidentify(b)
	}
	_ = os.Remove(file)
	if err != nil {
		_ = os.WriteFile(filepath.Join(dir, agent.IdentityErrFile), []byte(err.Error()), 0o600)
	}
}

func (s *server) reidentify(b []byte) error {
	var id agent.Identity
	if err := json.Unmarshal(b, &id); err != nil {
		return fmt.Errorf("read the new identity: %w", err)
	}
	if !validMachineID(id.MachineID) || id.Hostname == "" || len(id.Hostname) > 64 {
		return fmt.Errorf("the new identity %+v is not a host name and a machine id", id)
	}
	identity.Lock()
	defer identity.Unlock()
	if identity.files == nil {
		return errors.New("this sandbox has no identity files of its own")
	}
	if err := unix.Sethostname([]byte(id.Hostname)); err != nil {
		return fmt.Errorf("set the host name: %w", err)
	}
	if err := writeOwnIdentity(s.cfg, id); err != nil {
		return err
	}
	s.cfg.Hostname = id.Hostname
	return nil
}

// validMachineID says m is 32 lower-case hex digits.
func validMachineID(m string) bool {
	if len(m) != 32 {
		return false
	}
	for _, c := range m {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
