package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/internal/objstore"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
	"github.com/airlock-sandbox/airlock/internal/snapshot/s3store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// openObjects opens what the config names for snapshots and exports: the
// snapshot store (STATE/snapshots, or the [object_store] bucket with
// [snapshots] store = "s3") and the object store's client (nil when no
// [export] bucket and no snapshot uses it). Credentials come from the
// config file or the daemon's environment, never from a sandbox.
func openObjects(ctx context.Context, cfg supervisor.Config, stateDir string) (snapshot.Store, *objstore.Client, error) {
	var client *objstore.Client
	if cfg.UsesObjects() {
		c, err := objstore.New(cfg.ObjectStore)
		if err != nil {
			return nil, nil, cfg.KeyError("object_store", err)
		}
		client = c
	}
	if cfg.Snapshots.Store != supervisor.SnapshotsS3 {
		snaps, err := snapshot.OpenLocal(filepath.Join(stateDir, "snapshots"))
		return snaps, client, err
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	snaps, err := s3store.Open(octx, client, cfg.Snapshots.Bucket, cfg.Snapshots.Prefix)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (the [snapshots] and [object_store] sections of the config file)", err)
	}
	return snaps, client, nil
}
