package microvm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
)

// vmm runs virtual machines, one process each. QEMU (-M microvm) is the one
// airlock has; Firecracker, where it can run, would be another: the driver
// uses nothing of a VMM but this.
type vmm interface {
	// Name names the VMM and its version ("QEMU 7.2.22").
	Name() string
	// Start starts m and returns it running: booting, or resuming where
	// its snapshot was saved.
	Start(ctx context.Context, m *machine) (*vm, error)
	// Save saves the device state of v, a machine whose RAM is a shared
	// file (machine.RAMShared), to state. The machine is paused afterwards;
	// its RAM file and state are a snapshot.
	Save(ctx context.Context, v *vm, state *os.File) error
	// Migrate stops v and saves all of it, its memory with its devices,
	// to out; v stays stopped until Cont. A plain stream is saved without
	// x-ignore-shared, so that a machine whose RAM is a shared file can
	// load it (livefork_linux.go).
	Migrate(ctx context.Context, v *vm, out *os.File, plain bool) error
	// Cont lets a machine stopped by Migrate run on.
	Cont(ctx context.Context, v *vm) error
}

// machine is one virtual machine to start.
type machine struct {
	// Accel is "kvm" or "tcg".
	Accel     string
	VCPUs     int
	MemoryMiB int
	// Kernel, Initramfs and Cmdline boot the guest.
	Kernel, Initramfs, Cmdline string
	// RootImage is the read-only root disk.
	RootImage string
	// RAM, when set, backs the guest's memory: the guest writes it when
	// RAMShared (a snapshot being made), else it sees a private
	// copy-on-write view of it (a snapshot restored, its pages shared
	// with every other machine restored from it).
	RAM       *os.File
	RAMShared bool
	// AnonRAM, without RAM, makes the memory a backend of anonymous
	// memory with the same name as RAM's (a paused machine that ran on a
	// snapshot's RAM loads into it). A page of a private mapping of a
	// memfd costs the host twice once written: the memfd's page, read in
	// first, and the copy.
	AnonRAM bool
	// State, when set, is the saved device state the machine resumes from.
	State *os.File
	// StatePlain says State was saved without x-ignore-shared (a live
	// fork's checkpoint): QEMU loads a stream only with the capability it
	// was saved with.
	StatePlain bool
	// Cont says State was saved stopped (a pause): the machine is
	// continued once it is loaded. Hold instead leaves it stopped once
	// loaded (a live fork's checkpoint loaded into a shared RAM file, to
	// be saved again).
	Cont, Hold bool
	// UID and GID run the VMM (0: the caller's), with Groups as its only
	// supplementary groups.
	UID, GID int
	Groups   []uint32
	// Group is the host cgroup the VMM starts in; nil for none.
	Group *cgroup.Group
	// Console receives the guest's console and the VMM's own messages.
	Console io.Writer
}

// vm is a running virtual machine.
type vm struct {
	// Agent is the host's end of the agent's port.
	Agent net.Conn
	// Pid is the VMM's process.
	Pid  int
	proc *os.Process
	// ctl is the VMM's control connection (QMP for QEMU).
	ctl io.Closer

	done    chan struct{}
	waitErr error
	once    sync.Once
}

// Done is closed when the VMM has exited.
func (v *vm) Done() <-chan struct{} { return v.done }

// Err is how the VMM exited, once Done is closed.
func (v *vm) Err() error {
	<-v.done
	return v.waitErr
}

// Kill kills the VMM and waits up to timeout for it to be gone; the guest
// dies with it.
func (v *vm) Kill(timeout time.Duration) bool {
	v.once.Do(func() {
		_ = v.Agent.Close()
		if v.ctl != nil {
			_ = v.ctl.Close()
		}
	})
	_ = v.proc.Signal(syscall.SIGKILL)
	select {
	case <-v.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// waitReady waits for the guest's init to say it is ready on the agent's
// port, within timeout. What it reads is bounded: the guest is not
// trusted.
func (v *vm) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { _ = v.Agent.SetReadDeadline(time.Now()) })
	defer stop()
	want := []byte(agent.GuestReady)
	got := make([]byte, 0, len(want))
	buf := make([]byte, len(want))
	for len(got) < len(want) {
		n, err := v.Agent.Read(buf[:len(want)-len(got)])
		got = append(got, buf[:n]...)
		if !bytes.HasPrefix(want, got) {
			return fmt.Errorf("the guest said %q instead of that it is ready", got)
		}
		if err != nil {
			select {
			case <-v.done:
				return fmt.Errorf("the virtual machine exited while booting: %w", exitError(v.Err()))
			default:
			}
			if ctx.Err() != nil {
				return fmt.Errorf("the guest did not boot within %v: %w", timeout, errBootTimeout)
			}
			return fmt.Errorf("read the agent's port: %w", err)
		}
	}
	_ = v.Agent.SetReadDeadline(time.Time{})
	return nil
}

// errBootTimeout is a boot that hung: another attempt may work.
var errBootTimeout = errors.New("boot timed out")

// exitError is how a VMM exited: its error, or that it ended by itself.
func exitError(err error) error {
	if err == nil {
		return errors.New("it ended by itself (exit status 0)")
	}
	return err
}
