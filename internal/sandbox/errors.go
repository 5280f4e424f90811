package sandbox

import (
	"errors"
	"fmt"
	"strings"
)

// Error classes. Wrap them with what was being done; test with errors.Is.
var (
	ErrNotFound    = errors.New("not found")
	ErrExists      = errors.New("already exists")
	ErrUnsupported = errors.New("not supported on this host")
	ErrLimit       = errors.New("limit reached")
	ErrInvalid     = errors.New("invalid request")
	ErrClosed      = errors.New("sandbox is closed")
	// ErrOutside is a path that would lead outside the sandbox's root.
	ErrOutside = errors.New("path leads outside the sandbox")
	// ErrDetached is what a process's Wait returns when this airlock let
	// go of its sandbox (Detacher) before the process ended: it runs on,
	// and its result is for whoever reattaches. It is not a result.
	ErrDetached = errors.New("airlock let go of the sandbox; the command runs on")
	// ErrMismatch is every call but Close on a sandbox whose agent speaks
	// another protocol than this airlock (reattached after an upgrade).
	ErrMismatch = errors.New("the sandbox's agent speaks another protocol version")
)

// LayerError says that an isolation layer is missing on this host, and how
// to get it.
type LayerError struct {
	Layer Layer
	Why   string
	Fix   string
}

func (e *LayerError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "isolation layer %s is unavailable: %s", e.Layer, e.Why)
	if e.Fix != "" {
		fmt.Fprintf(&b, "; fix: %s", e.Fix)
	}
	fmt.Fprintf(&b, " (or accept running without it: --allow-degraded %s)", e.Layer)
	return b.String()
}

func (e *LayerError) Unwrap() error { return ErrUnsupported }

// CommandError says the command could not be started inside the sandbox.
// Code is 127 when it was not found and 126 when it was not executable, as a
// shell and Docker report.
type CommandError struct {
	Code int
	Msg  string
}

func (e *CommandError) Error() string { return e.Msg }

// Result is the result of an exec that could not start: its code, reason
// exit, and the message.
func (e *CommandError) Result() Result {
	return Result{ExitCode: e.Code, Reason: ReasonExit, LimitsHit: []Limit{}, Message: e.Msg}
}

// UnsupportedError says that this host cannot run something (a driver, a
// feature), why, and how to make it. It wraps ErrUnsupported.
type UnsupportedError struct {
	What string // "gvisor", "network mode egress"
	Why  string
	Fix  string
}

func (e *UnsupportedError) Error() string {
	msg := e.What + ": " + e.Why
	if e.Fix != "" {
		msg += " (fix: " + e.Fix + ")"
	}
	return msg
}

func (e *UnsupportedError) Unwrap() error { return ErrUnsupported }
