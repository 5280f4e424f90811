//go:build !linux

package cow

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
)

var errUnsupported = fmt.Errorf("%w: copy-on-write mounts need Linux (overlayfs)", sandbox.ErrUnsupported)

// Layer is a cow mount made on the host.
type Layer struct {
	Dir, Source, Target string
}

// IDMap is the sandbox's owner of the mount (Linux only).
type IDMap struct{ UID, GID int }

// Make needs Linux.
func Make(context.Context, string, string, sandbox.Mount, int64, IDMap) (*Layer, *os.File, error) {
	return nil, nil, errUnsupported
}

// Remove needs Linux.
func Remove(string) error { return nil }

// Changes needs Linux.
func Changes(context.Context, string, snapshot.DiffLimits) (*Pending, error) {
	return nil, errUnsupported
}

// Count needs Linux.
func Count(context.Context, string) (int, error) { return 0, errUnsupported }

// Info needs Linux.
func Info(dir string) (string, string, error) {
	m, err := loadMeta(dir)
	if err != nil {
		return "", "", err
	}
	return m.Source, m.Target, nil
}

// ApplyReviewed needs Linux.
func ApplyReviewed(context.Context, string, []string, map[string]string) (*ApplyResult, error) {
	return nil, errUnsupported
}

// ApplyWith needs Linux.
func ApplyWith(context.Context, string, ApplyOptions) (*ApplyResult, error) {
	return nil, errUnsupported
}

// Apply needs Linux.
func Apply(context.Context, string, []string) (*ApplyResult, error) { return nil, errUnsupported }

// Discard needs Linux.
func Discard(context.Context, string, []string) (*DiscardResult, error) {
	return nil, errUnsupported
}

// Recovery is what the next start found of an interrupted apply.
type Recovery struct {
	Sandbox, Source, Target string
	Started                 time.Time
	Applied, NotApplied     []string
}

// RecoverAll has nothing to do off Linux.
func RecoverAll(string) ([]Recovery, error) { return nil, nil }
