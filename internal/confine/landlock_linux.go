package confine

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Landlock is a file-system ruleset: everything outside the listed paths is
// denied. Network rights are left alone (the sandbox has its own network
// namespace, and workloads may bind and connect on loopback).
type Landlock struct {
	// ReadExec are paths beneath which files may be read and executed and
	// directories listed. Nil means none.
	ReadExec []string
	// ReadWrite are paths beneath which every file-system right is granted.
	// Nil means none.
	ReadWrite []string
	// Scoped (ABI 6+) also confines signals and abstract unix sockets to
	// the domain. Each RestrictThread call makes a domain of its own, so
	// scoped commands cannot signal one another either. False leaves them
	// to the other layers (uids, namespaces).
	Scoped bool
}

// Landlock file-system rights, by the ABI version that introduced them.
const (
	fsRightsV1 = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_DIR | unix.LANDLOCK_ACCESS_FS_REMOVE_FILE |
		unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_DIR |
		unix.LANDLOCK_ACCESS_FS_MAKE_REG | unix.LANDLOCK_ACCESS_FS_MAKE_SOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_FIFO | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_SYM
	fsRightsV2 = fsRightsV1 | unix.LANDLOCK_ACCESS_FS_REFER
	fsRightsV3 = fsRightsV2 | unix.LANDLOCK_ACCESS_FS_TRUNCATE
	fsRightsV5 = fsRightsV3 | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	fsRightsV9 = fsRightsV5 | unix.LANDLOCK_ACCESS_FS_RESOLVE_UNIX

	// fsReadExec is what ReadExec paths grant.
	fsReadExec = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_DIR
	// fsFileRights are the rights that apply to a file rather than a
	// directory; a rule on a file may grant only these.
	fsFileRights = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE |
		unix.LANDLOCK_ACCESS_FS_IOCTL_DEV

	// scopes isolates the domain's IPC: no signals to, and no connections
	// to abstract unix sockets of, processes outside it (ABI 6).
	scopes = unix.LANDLOCK_SCOPE_SIGNAL | unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
)

// handledFS returns the file-system rights ABI version abi knows.
func handledFS(abi int) uint64 {
	switch {
	case abi >= 9:
		return fsRightsV9
	case abi >= 5:
		return fsRightsV5
	case abi >= 3:
		return fsRightsV3
	case abi >= 2:
		return fsRightsV2
	case abi >= 1:
		return fsRightsV1
	}
	return 0
}

// LandlockABI returns the kernel's Landlock ABI version, or 0 when Landlock
// is not built in or not enabled.
func LandlockABI() int {
	v, err := landlockVersion()
	if err != nil {
		return 0
	}
	return v
}

// RestrictThread enforces l on the calling thread only (no TSYNC); children
// forked from the thread afterwards inherit it. The calling goroutine must be
// locked to its thread and stay locked, and the thread needs no_new_privs
// (SetNoNewPrivs) or CAP_SYS_ADMIN.
//
// It handles every file-system right of the running ABI that this package
// knows (REFER from ABI 2, TRUNCATE from 3, IOCTL_DEV from 5, RESOLVE_UNIX
// from 9), and with l.Scoped (ABI 6+) also scopes signals and abstract unix
// sockets to the domain.
// Paths are resolved, following symlinks, when RestrictThread runs; a path
// that does not exist is skipped, and one that is not a directory gets only
// the rights that apply to files. It returns the kernel's ABI version;
// without Landlock the error wraps sandbox.ErrUnsupported.
func (l Landlock) RestrictThread() (abi int, err error) {
	r, err := l.Build()
	if err != nil {
		return 0, err
	}
	defer r.Close()
	if err := r.RestrictThread(); err != nil {
		return 0, err
	}
	return r.abi, nil
}

// LandlockRuleset is a ruleset built once (paths resolved then) to restrict
// any number of threads: each RestrictThread makes a domain of its own
// from it, as Landlock.RestrictThread does, without resolving the paths
// and adding the rules again.
type LandlockRuleset struct {
	fd  int
	abi int
}

// Build makes l's ruleset; see RestrictThread for what it handles. Paths
// are resolved now, relative to the calling thread's root.
func (l Landlock) Build() (*LandlockRuleset, error) {
	abi := LandlockABI()
	if abi < 1 {
		return nil, fmt.Errorf("landlock: not available (needs Linux 5.13+ with landlock in the lsm= list): %w", sandbox.ErrUnsupported)
	}
	handled := handledFS(abi)
	attr := unix.LandlockRulesetAttr{Handled_access_fs: handled}
	if abi >= 6 && l.Scoped {
		attr.Scoped = scopes
	}
	ruleset, err := landlockCreateRuleset(&attr)
	if err != nil {
		return nil, fmt.Errorf("landlock: create ruleset: %w", err)
	}
	r := &LandlockRuleset{fd: ruleset, abi: abi}
	for _, p := range l.ReadExec {
		if err := addPath(ruleset, p, fsReadExec&handled); err != nil {
			r.Close()
			return nil, err
		}
	}
	for _, p := range l.ReadWrite {
		if err := addPath(ruleset, p, handled); err != nil {
			r.Close()
			return nil, err
		}
	}
	return r, nil
}

// RestrictThread enforces the ruleset on the calling thread only, in a
// domain of its own; see Landlock.RestrictThread.
func (r *LandlockRuleset) RestrictThread() error {
	if err := landlockRestrictSelf(r.fd); err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("landlock: restrict thread: %w (set no_new_privs first)", err)
		}
		return fmt.Errorf("landlock: restrict thread: %w", err)
	}
	return nil
}

// Close releases the ruleset; the domains made from it stay.
func (r *LandlockRuleset) Close() {
	_ = unix.Close(r.fd)
}

// addPath grants access beneath path, or on it when it is not a directory.
func addPath(ruleset int, path string, access uint64) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil // nothing there to grant
	}
	if err != nil {
		return fmt.Errorf("landlock: open %s: %w", path, err)
	}
	defer func() { _ = unix.Close(fd) }()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("landlock: stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		access &= fsFileRights
	}
	if access == 0 {
		return nil
	}
	rule := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(fd)}
	if err := landlockAddPathRule(ruleset, &rule); err != nil {
		return fmt.Errorf("landlock: add rule for %s: %w", path, err)
	}
	return nil
}
