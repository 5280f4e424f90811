//go:build !linux && !darwin

package tty

import "errors"

var errNoTerminals = errors.New("terminals are not supported on this system")

// IsTerminal reports false: this system has no terminals airlock knows.
func IsTerminal(int) bool { return false }

// GetSize fails.
func GetSize(int) (Size, error) { return Size{}, errNoTerminals }

// State is a terminal's modes.
type State struct{}

// MakeRaw fails.
func MakeRaw(int) (*State, error) { return nil, errNoTerminals }

// Restore does nothing.
func (*State) Restore() error { return nil }
