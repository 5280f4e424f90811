package supervisor

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// This file holds what a pause can run out of: the disk the pause images
// live on, and the owner's quota of stored bytes. A pause image counts
// toward the key's max_snapshot_bytes with its snapshots (both are what
// the daemon stores for the key); a pause that would pass it is refused
// and the sandbox runs on.

// storedBytes is what owner's snapshots and paused sandboxes store,
// beside the paused sandbox except (whose pause is being redone).
func (s *Supervisor) storedBytes(ctx context.Context, owner, except string) (int64, error) {
	var n int64
	if st := s.opts.Snapshots; st != nil {
		u, err := st.Usage(ctx, owner)
		if err != nil {
			return 0, err
		}
		n = u.Bytes
	}
	return n + s.pausedBytes(owner, except), nil
}

// pausedBytes is what owner's paused sandboxes (but except) store.
func (s *Supervisor) pausedBytes(owner, except string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for id, l := range s.live {
		if id == except || l.owner != owner {
			continue
		}
		l.mu.Lock()
		if p := l.rec.Paused; l.rec.State == store.StatePaused && p != nil {
			n += p.Bytes
		}
		l.mu.Unlock()
	}
	return n
}

// checkStored refuses the pause of owner's sandbox id when owner's stored
// bytes, with adding more, pass its quota.
func (s *Supervisor) checkStored(ctx context.Context, owner, id string, adding int64) error {
	q := s.ownerQuota(owner)
	have, err := s.storedBytes(ctx, owner, id)
	if err != nil {
		return fmt.Errorf("pause sandbox %s: read the key's stored bytes: %w", id, err)
	}
	if have+adding > q.MaxSnapshotBytes || (adding == 0 && have >= q.MaxSnapshotBytes) {
		what := "holds"
		if adding > 0 {
			what = fmt.Sprintf("would hold %s with this pause's %s image; it holds", bytesText(have+adding), bytesText(adding))
		}
		return fmt.Errorf("pause sandbox %s: %w: this key's snapshots and paused sandboxes may store %s together (max_snapshot_bytes), and it %s %s: the sandbox runs on; delete snapshots or paused sandboxes", id, ErrQuota, bytesText(q.MaxSnapshotBytes), what, bytesText(have))
	}
	return nil
}

// diskFull is the error of sandbox id's pause into dir that failed with
// err because dir's disk is full, or nil when that is not why.
func diskFull(id, dir string, err error) error {
	var st unix.Statfs_t
	free := int64(-1)
	if unix.Statfs(dir, &st) == nil {
		free = int64(st.Bavail) * int64(st.Bsize)
	}
	if !errors.Is(err, syscall.ENOSPC) && !strings.Contains(err.Error(), "no space left on device") && (free < 0 || free >= 1<<20) {
		return nil
	}
	where := filepath.Dir(dir)
	if free >= 0 {
		where += ", " + bytesText(free) + " free"
	}
	return fmt.Errorf("pause sandbox %s: %w: the disk its image is written to is full (%s): the sandbox runs on; free space there, or delete paused sandboxes", id, sandbox.ErrLimit, where)
}
