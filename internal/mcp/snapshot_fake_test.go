package mcp_test

import (
	"context"
	"time"

	"github.com/airlock-sandbox/airlock/internal/mcp"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
)

// The fake backend keeps no snapshots: its snapshot calls say so (the
// tools are exercised on the native driver, in native_linux_test.go).

var errNoSnapshots = &sandbox.UnsupportedError{What: "snapshots", Why: "the fake backend keeps none"}

func (f *fakeBackend) Snapshot(context.Context, string, mcp.SnapshotRequest) (mcp.SnapshotInfo, error) {
	return mcp.SnapshotInfo{}, errNoSnapshots
}

func (f *fakeBackend) Snapshots(context.Context, string) ([]mcp.SnapshotInfo, error) {
	return nil, errNoSnapshots
}

func (f *fakeBackend) Restore(context.Context, string, string, int) (mcp.RestoreInfo, error) {
	return mcp.RestoreInfo{}, errNoSnapshots
}

func (f *fakeBackend) Diff(context.Context, string, string, string, int64) (*snapshot.Diff, error) {
	return nil, errNoSnapshots
}

func (f *fakeBackend) Fork(context.Context, string, string, time.Duration) (mcp.SandboxInfo, error) {
	return mcp.SandboxInfo{}, errNoSnapshots
}
