package microvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// qemuBinary is the QEMU system emulator the driver runs.
const qemuBinary = "qemu-system-x86_64"

// tcgCacheMiB bounds the translation cache of an emulated (TCG) machine:
// QEMU's default is 1 GiB of host memory per machine.
const tcgCacheMiB = 128

// qemu is the QEMU VMM: `qemu-system-x86_64 -M microvm`, one process per
// sandbox, talked to over QMP.
type qemu struct {
	path    string
	version string // "7.2.22"
}

var _ vmm = (*qemu)(nil)

// findQEMU finds QEMU (path, or qemuBinary on PATH) and asks its version.
func findQEMU(ctx context.Context, path string) (*qemu, error) {
	if path == "" {
		p, err := exec.LookPath(qemuBinary)
		if err != nil {
			return nil, fmt.Errorf("%s is not installed (apt-get install qemu-system-x86)", qemuBinary)
		}
		path = p
	}
	out, err := tool(ctx, "/", path, "--version")
	if err != nil {
		return nil, fmt.Errorf("%s does not run: %w", path, err)
	}
	line, _, _ := strings.Cut(out, "\n")
	f := strings.Fields(strings.TrimPrefix(line, "QEMU emulator version "))
	if len(f) == 0 {
		return nil, fmt.Errorf("%s --version says %q", path, line)
	}
	return &qemu{path: path, version: f[0]}, nil
}

func (q *qemu) Name() string { return "QEMU " + q.version }

// Descriptors the QEMU process gets, in this order, from 3 on.
const (
	qemuFDAgent = 3 // a socket: the agent's port
	qemuFDQMP   = 4 // a socket: QMP
	qemuFDFirst = 5 // then RAM, then State, those the machine has
)

// args returns QEMU's command line for m: the microvm machine with no
// default devices, no network device at all, the kernel and initramfs, the
// root disk read-only, the agent's port on virtio-serial, QMP, the guest's
// console on standard output, no reboot (a guest restart ends QEMU), and
// QEMU's own seccomp sandbox, which refuses it new processes, privileges
// and resource controls.
func (q *qemu) args(m *machine) []string {
	mach := "microvm"
	if m.RAM != nil || m.AnonRAM {
		mach += ",memory-backend=ram"
	}
	a := []string{
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-machine", mach,
	}
	a = append(a, q.cpuArgs(m)...)
	a = append(a, "-smp", strconv.Itoa(m.VCPUs), "-m", strconv.Itoa(m.MemoryMiB)+"M")
	if m.RAM != nil {
		share := "off"
		if m.RAMShared {
			share = "on"
		}
		a = append(a, "-object", fmt.Sprintf("memory-backend-file,id=ram,size=%dM,mem-path=/dev/fd/%d,share=%s", m.MemoryMiB, qemuFDFirst, share))
	} else if m.AnonRAM {
		a = append(a, "-object", fmt.Sprintf("memory-backend-ram,id=ram,size=%dM", m.MemoryMiB))
	}
	a = append(a,
		"-kernel", m.Kernel, "-initrd", m.Initramfs, "-append", m.Cmdline,
		"-drive", "file="+qemuOptValue(m.RootImage)+",format=raw,if=none,id=root,readonly=on",
		"-device", "virtio-blk-device,drive=root",
		"-device", "virtio-serial-device,max_ports=2",
		"-chardev", "socket,id=agent,fd="+strconv.Itoa(qemuFDAgent),
		"-device", "virtserialport,chardev=agent,name="+agentPort,
		"-chardev", "socket,id=qmp,fd="+strconv.Itoa(qemuFDQMP),
		"-mon", "chardev=qmp,mode=control",
		"-serial", "stdio",
		"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
	)
	if m.State != nil {
		a = append(a, "-incoming", "defer")
	}
	return a
}

// bareArgs returns QEMU's command line for a bare boot of m: the machine,
// the kernel and initramfs, the console, nothing else.
func (q *qemu) bareArgs(m *machine) []string {
	a := []string{"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-machine", "microvm"}
	a = append(a, q.cpuArgs(m)...)
	return append(a, "-smp", strconv.Itoa(m.VCPUs), "-m", strconv.Itoa(m.MemoryMiB)+"M",
		"-kernel", m.Kernel, "-initrd", m.Initramfs, "-append", m.Cmdline, "-serial", "stdio")
}

// cpuArgs are the accelerator and CPU model of m.
func (q *qemu) cpuArgs(m *machine) []string {
	if m.Accel == "kvm" {
		return []string{"-accel", "kvm", "-cpu", "host"}
	}
	return []string{"-accel", "tcg,tb-size=" + strconv.Itoa(tcgCacheMiB), "-cpu", "max"}
}

// qemuOptValue escapes a value of a QEMU option list (a comma is doubled).
func qemuOptValue(s string) string { return strings.ReplaceAll(s, ",", ",,") }

// Start starts QEMU for m inside m.Group, as m.UID. A machine with a
// snapshot resumes once QMP has set up the migration from it.
func (q *qemu) Start(ctx context.Context, m *machine) (_ *vm, err error) {
	agentHost, agentVM, err := socketPair("agent")
	if err != nil {
		return nil, err
	}
	defer agentVM.Close()
	qmpHost, qmpVM, err := socketPair("qmp")
	if err != nil {
		agentHost.Close()
		return nil, err
	}
	defer qmpVM.Close()
	files := []*os.File{agentVM, qmpVM}
	stateFD := 0
	if m.RAM != nil {
		files = append(files, m.RAM)
	}
	if m.State != nil {
		stateFD = 3 + len(files)
		files = append(files, m.State)
	}
	cmd := &exec.Cmd{
		Path:       q.path,
		Args:       append([]string{qemuBinary}, q.args(m)...),
		Env:        []string{},
		Dir:        "/",
		Stdout:     m.Console,
		Stderr:     m.Console,
		ExtraFiles: files,
		SysProcAttr: &syscall.SysProcAttr{
			Setsid:    true,
			Pdeathsig: syscall.SIGKILL,
		},
	}
	if m.UID != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(m.UID), Gid: uint32(m.GID), Groups: append([]uint32{}, m.Groups...)}
	}
	if m.Group != nil {
		err = m.Group.Start(cmd)
	} else {
		err = cmd.Start()
	}
	// QEMU holds its ends now: once it exits, the host's ends read EOF.
	agentVM.Close()
	qmpVM.Close()
	if err != nil {
		agentHost.Close()
		qmpHost.Close()
		return nil, fmt.Errorf("start %s: %w", q.path, err)
	}
	v := &vm{Agent: agentHost, Pid: cmd.Process.Pid, proc: cmd.Process, done: make(chan struct{})}
	go func() {
		v.waitErr = cmd.Wait()
		close(v.done)
	}()
	defer func() {
		if err != nil {
			v.Kill(5 * time.Second)
			qmpHost.Close()
		}
	}()
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stop := context.AfterFunc(qctx, func() { _ = qmpHost.SetDeadline(time.Now()) })
	defer stop()
	ctl, err := dialQMP(qctx, qmpHost)
	if err != nil {
		return nil, q.startError(v, err)
	}
	v.ctl = ctl
	if m.State != nil {
		// A stream loads only with the capability it was saved with.
		if !m.StatePlain {
			caps := []map[string]any{{"capability": "x-ignore-shared", "state": true}}
			if _, err := ctl.call(qctx, "migrate-set-capabilities", map[string]any{"capabilities": caps}); err != nil {
				return nil, q.startError(v, err)
			}
		}
		if _, err := ctl.call(qctx, "migrate-incoming", map[string]any{"uri": "fd:" + strconv.Itoa(stateFD)}); err != nil {
			return nil, q.startError(v, err)
		}
		// Loading the device state takes milliseconds (the RAM is mapped,
		// not read); a snapshot QEMU cannot load ends it.
		if err := waitRunning(qctx, ctl, m.Cont, m.Hold); err != nil {
			return nil, q.startError(v, fmt.Errorf("restore the snapshot: %w", err))
		}
	}
	return v, nil
}

// waitRunning waits until the machine runs: its incoming migration is
// done (a snapshot was saved running, so it resumes by itself; a paused
// machine was saved stopped, and is continued when cont says so, or
// left stopped when hold says so).
func waitRunning(ctx context.Context, ctl *qmp, cont, hold bool) error {
	for {
		raw, err := ctl.call(ctx, "query-status", nil)
		if err != nil {
			return err
		}
		var st struct {
			Status string `json:"status"`
		}
		if err := json.Unmarshal(raw, &st); err != nil {
			return fmt.Errorf("query-status: %w", err)
		}
		switch st.Status {
		case "running":
			return nil
		case "inmigrate", "prelaunch":
		case "paused":
			if hold {
				return nil
			}
			if !cont {
				return errors.New("the machine is paused, not running")
			}
			if _, err := ctl.call(ctx, "cont", nil); err != nil {
				return err
			}
		default:
			return fmt.Errorf("the machine is %s, not running", st.Status)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// startError is err, or how QEMU exited when it has.
func (q *qemu) startError(v *vm, err error) error {
	select {
	case <-v.done:
		return fmt.Errorf("QEMU exited: %w", exitError(v.waitErr))
	case <-time.After(200 * time.Millisecond):
		return err
	}
}

// Save saves v's device state to state with QEMU's migration: its RAM is
// the shared file it runs on and is left out of the stream
// (x-ignore-shared); QEMU stops the machine to save the devices, and it
// stays stopped.
func (q *qemu) Save(ctx context.Context, v *vm, state *os.File) error {
	ctl, ok := v.ctl.(*qmp)
	if !ok {
		return errors.New("save: no QMP connection to QEMU")
	}
	caps := []map[string]any{{"capability": "x-ignore-shared", "state": true}}
	if _, err := ctl.call(ctx, "migrate-set-capabilities", map[string]any{"capabilities": caps}); err != nil {
		return err
	}
	if _, err := ctl.callFD(ctx, "getfd", map[string]any{"fdname": "state"}, state); err != nil {
		return err
	}
	if _, err := ctl.call(ctx, "migrate", map[string]any{"uri": "fd:state"}); err != nil {
		return err
	}
	return awaitMigration(ctx, ctl)
}

// awaitMigration waits until the machine's outgoing migration is done.
func awaitMigration(ctx context.Context, ctl *qmp) error {
	for {
		raw, err := ctl.call(ctx, "query-migrate", nil)
		if err != nil {
			return err
		}
		var st struct {
			Status string `json:"status"`
			Error  string `json:"error-desc"`
		}
		if err := json.Unmarshal(raw, &st); err != nil {
			return fmt.Errorf("query-migrate: %w", err)
		}
		switch st.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			return fmt.Errorf("save the virtual machine: migration %s: %s", st.Status, st.Error)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("save the virtual machine: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// socketPair returns a connected pair of Unix stream sockets: the host's
// end as a connection, the other as a file to hand to a child.
func socketPair(name string) (*net.UnixConn, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("make the %s connection: %w", name, err)
	}
	host := os.NewFile(uintptr(fds[0]), name)
	defer host.Close()
	c, err := net.FileConn(host)
	if err != nil {
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("make the %s connection: %w", name, err)
	}
	return c.(*net.UnixConn), os.NewFile(uintptr(fds[1]), name), nil
}
