// Package hostlock ties what a sandbox owns on the host to the process that
// owns it, with file locks the kernel drops when that process dies: the
// sandbox's id, taken once across every driver, and (native) its range of
// host uids. A sweeper that can take a sandbox's lock knows its owner is
// gone and may remove what is left of it.
package hostlock

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Lock is a lock this process holds until it releases it or dies.
type Lock struct{ f *os.File }

// Path is the lock file.
func (l *Lock) Path() string { return l.f.Name() }

// File is the lock's open file. The lock is held as long as any process
// holds a descriptor of it: a process started with a copy (inherited)
// keeps the lock after this one is gone, which is how a sandbox that
// outlives the airlock process that made it keeps its id and uid range.
func (l *Lock) File() *os.File { return l.f }

// Held says whether a live process holds the lock dir/name.lock, without
// taking it.
func Held(dir, name string) bool {
	f, err := os.OpenFile(filepath.Join(dir, name+".lock"), os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		return errors.Is(err, unix.EWOULDBLOCK)
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}

// SandboxDir is where the sandbox-id locks below stateDir are.
func SandboxDir(stateDir string) string { return filepath.Join(stateDir, "sandboxes") }

// Release removes the lock file and drops the lock.
func (l *Lock) Release() {
	if l == nil || l.f == nil {
		return
	}
	os.Remove(l.f.Name())
	l.f.Close()
}

// Drop drops the lock and keeps the file (a slot that is used again).
func (l *Lock) Drop() {
	if l == nil || l.f == nil {
		return
	}
	l.f.Close()
}

// Take takes an exclusive lock on dir/name.lock. It fails with an error
// wrapping sandbox.ErrExists when a live process holds it.
func Take(dir, name string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, fmt.Errorf("make state directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, name+".lock"), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s is taken: %w", name, sandbox.ErrExists)
		}
		return nil, fmt.Errorf("lock: %w", err)
	}
	return &Lock{f: f}, nil
}

// Sandbox takes the lock of sandbox id below stateDir: an id is taken once
// across every driver of every airlock process that shares stateDir.
func Sandbox(stateDir, id string) (*Lock, error) {
	if !sandbox.ValidID(id) {
		return nil, fmt.Errorf("sandbox id %q: %w", id, sandbox.ErrInvalid)
	}
	return Take(filepath.Join(stateDir, "sandboxes"), id)
}

// WaitSandbox takes the lock of sandbox id once the process that holds it
// is gone (a sandbox's holder that was just killed), waiting at most d.
func WaitSandbox(stateDir, id string, d time.Duration) (*Lock, error) {
	for deadline := time.Now().Add(d); ; time.Sleep(5 * time.Millisecond) {
		l, err := Sandbox(stateDir, id)
		if err == nil || !errors.Is(err, sandbox.ErrExists) || time.Now().After(deadline) {
			return l, err
		}
	}
}

// RangeSize is the number of host uids (and gids) in each range.
const RangeSize = 65536

// Ranges of host uids that sandboxes own, one each, so that per-uid kernel
// limits are never shared between sandboxes: 16384 of them, from
// 0x10000000 to 0x4fffffff, more sandboxes than a host runs at once (4096
// stopped the density test short of 5,000).
const (
	rangeFirst = 0x10000000
	rangeSlots = 16384
)

// IsRangeBase says whether uid is the first uid of one of the ranges.
func IsRangeBase(uid int) bool {
	return uid >= rangeFirst && uid < rangeFirst+rangeSlots*RangeSize && (uid-rangeFirst)%RangeSize == 0
}

// UIDRange takes one of the host uid ranges below stateDir and returns its
// lock and its first uid.
func UIDRange(stateDir string) (*Lock, int, error) {
	dir := filepath.Join(stateDir, "uids")
	var b [2]byte
	_, _ = rand.Read(b[:])
	start := int(b[0])<<8 | int(b[1])
	for i := 0; i < rangeSlots; i++ {
		slot := (start + i) % rangeSlots
		l, err := Take(dir, strconv.Itoa(slot))
		if errors.Is(err, sandbox.ErrExists) {
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		return l, rangeFirst + slot*RangeSize, nil
	}
	return nil, 0, fmt.Errorf("all %d uid ranges are in use: %w", rangeSlots, sandbox.ErrLimit)
}

// SweepStale calls remove for each of ids (sandbox ids; others are passed
// over) whose lock no live process holds, holding it meanwhile: whoever
// owned that sandbox is gone, and what it left may go. It returns what
// remove said.
func SweepStale(stateDir string, ids []string, remove func(id string) error) error {
	var errs []error
	for _, id := range ids {
		if !sandbox.ValidID(id) || Held(SandboxDir(stateDir), id) {
			continue
		}
		lock, err := Sandbox(stateDir, id)
		if err != nil {
			continue // alive, or taken meanwhile
		}
		errs = append(errs, remove(id))
		lock.Release()
	}
	return errors.Join(errs...)
}
