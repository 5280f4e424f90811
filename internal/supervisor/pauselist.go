package supervisor

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot/s3store"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// Sandboxes paused on another daemon sharing the object store, in Get and
// List (decision 85). A Get of a sandbox this daemon has no record of
// reads its record in the bucket (PREFIX/paused/ID.json), one request;
// a List adds the caller's key's paused sandboxes from the bucket's index
// (PREFIX/paused-by/KEY/ID: one listing of that prefix, kept
// storedListTTL), each record read once per pause and kept. Such a
// sandbox is shown paused, as its record says; a resume here takes it up.

// storedListTTL is how long a listing of the bucket's index serves lists:
// a pause or resume on another daemon shows here at most this late.
const storedListTTL = 5 * time.Second

// maxStoredListed bounds the paused sandboxes one list reads from the
// bucket.
const maxStoredListed = 1000

// storedCache keeps the bucket's index listings (by key: "" for every
// key) and the records read for them (by id).
type storedCache struct {
	mu    sync.Mutex
	lists map[string]storedListing
	recs  map[string]storedRec
}

type storedListing struct {
	at      time.Time
	entries []s3store.PausedEntry
}

// storedRec is a record read, with its index entry's time: a new pause
// writes a new entry, and the record is read again.
type storedRec struct {
	at  time.Time
	rec store.Sandbox
}

// forgetStored drops what the cache holds of sandbox id, and the
// listings, after this daemon changed what the bucket holds of it.
func (s *Supervisor) forgetStored(id string) {
	s.stored.mu.Lock()
	delete(s.stored.recs, id)
	clear(s.stored.lists)
	s.stored.mu.Unlock()
}

// readStored reads paused sandbox id's record from the bucket: ok false
// when there is none, or it is not a paused sandbox's.
func readStored(ctx context.Context, ps pauseStore, id string) (store.Sandbox, bool, error) {
	b, err := ps.GetPaused(ctx, id)
	if errors.Is(err, sandbox.ErrNotFound) {
		return store.Sandbox{}, false, nil
	}
	if err != nil {
		return store.Sandbox{}, false, err
	}
	var rec store.Sandbox
	if json.Unmarshal(b, &rec) != nil || rec.ID != id || rec.State != store.StatePaused || rec.Paused == nil || rec.Paused.Stored == nil {
		return store.Sandbox{}, false, nil
	}
	return rec, true, nil
}

// storedGet describes sandbox id, which this daemon has no record of,
// from its paused record in the object store; ok false when there is
// none. Another key's is refused as a local one is.
func (s *Supervisor) storedGet(ctx context.Context, c Caller, id string) (Info, bool, error) {
	ps := s.pausedStore()
	if ps == nil {
		return Info{}, false, nil
	}
	rec, ok, err := readStored(ctx, ps, id)
	if err != nil || !ok {
		if err != nil {
			s.log.Warn("look up a sandbox in the object store", "sandbox_id", id, "err", err)
		}
		return Info{}, false, nil
	}
	if err := allowed(c, rec); err != nil {
		return Info{}, false, err
	}
	return recInfo(rec), true, nil
}

// pausedElsewhere is sandbox id's record in the object store when this
// daemon does not hold it (no record, or one that moved from here) and
// the store has it paused; ok false otherwise, or when the store cannot
// be read (logged). The caller checks the owner.
func (s *Supervisor) pausedElsewhere(id string) (rec store.Sandbox, ok bool) {
	ps := s.pausedStore()
	if ps == nil {
		return rec, false
	}
	s.mu.Lock()
	l := s.live[id]
	s.mu.Unlock()
	if l != nil {
		return rec, false
	}
	if here, err := s.store.GetSandbox(id); !errors.Is(err, sandbox.ErrNotFound) && (err != nil || here.EndReason != "moved") {
		return rec, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), storedReadTimeout)
	defer cancel()
	rec, ok, err := readStored(ctx, ps, id)
	if err != nil {
		s.log.Warn("look up a sandbox in the object store", "sandbox_id", id, "err", err)
	}
	return rec, ok
}

// storedReadTimeout bounds a read of one record in the object store for
// a call that carries no context of its own (lookup).
const storedReadTimeout = 30 * time.Second

// withStored adds to local, List's answer, the sandboxes of c (and f) the
// object store holds paused that are not live here; one of them replaces
// a record here that has ended (it moved, and was paused again
// elsewhere). In id order.
func (s *Supervisor) withStored(ctx context.Context, c Caller, f Filter, local []Info) []Info {
	ps := s.pausedStore()
	if ps == nil || (f.State != "" && f.State != store.StatePaused) {
		return local
	}
	owner := c.KeyID
	switch {
	case c.Operator:
		owner = f.Owner
	case owner == "" || (f.Owner != "" && f.Owner != owner):
		return local
	}
	entries, err := s.storedEntries(ctx, ps, owner)
	if err != nil {
		s.log.Warn("list the paused sandboxes of the object store", "key", owner, "err", err)
		return local
	}
	at := make(map[string]int, len(local))
	for i, in := range local {
		at[in.ID] = i
	}
	added := false
	for _, e := range entries {
		s.mu.Lock()
		l := s.live[e.ID]
		s.mu.Unlock()
		if l != nil {
			continue
		}
		rec, ok := s.storedRecord(ctx, ps, e)
		if !ok || allowed(c, rec) != nil || (f.Template != "" && rec.Template != f.Template) ||
			(f.Owner != "" && rec.Owner != f.Owner) || (f.Driver != "" && rec.Driver != f.Driver) || !f.matches(&rec) {
			continue
		}
		in := recInfo(rec)
		if i, ok := at[e.ID]; ok {
			local[i] = in
			continue
		}
		at[e.ID] = len(local)
		local = append(local, in)
		added = true
	}
	if added {
		slices.SortFunc(local, func(a, b Info) int { return cmp.Compare(a.ID, b.ID) })
	}
	return local
}

// storedEntries lists the bucket's index for owner, or answers the
// listing made within storedListTTL.
func (s *Supervisor) storedEntries(ctx context.Context, ps pauseStore, owner string) ([]s3store.PausedEntry, error) {
	now := time.Now()
	s.stored.mu.Lock()
	l, ok := s.stored.lists[owner]
	s.stored.mu.Unlock()
	if ok && now.Sub(l.at) < storedListTTL {
		return l.entries, nil
	}
	entries, err := ps.ListPaused(ctx, owner, maxStoredListed)
	if err != nil {
		return nil, err
	}
	s.stored.mu.Lock()
	if s.stored.lists == nil {
		s.stored.lists = map[string]storedListing{}
	}
	s.stored.lists[owner] = storedListing{at: now, entries: entries}
	s.stored.mu.Unlock()
	return entries, nil
}

// storedRecord is index entry e's record, read once per entry. An entry
// whose record is gone, or is not its key's, is removed (pruneEntry).
func (s *Supervisor) storedRecord(ctx context.Context, ps pauseStore, e s3store.PausedEntry) (store.Sandbox, bool) {
	s.stored.mu.Lock()
	r, ok := s.stored.recs[e.ID]
	s.stored.mu.Unlock()
	if ok && r.at.Equal(e.At) && r.rec.Owner == e.Owner {
		return r.rec, true
	}
	rec, ok, err := readStored(ctx, ps, e.ID)
	if err != nil {
		s.log.Warn("read a paused sandbox's record in the object store", "sandbox_id", e.ID, "err", err)
		return store.Sandbox{}, false
	}
	if !ok || rec.Owner != e.Owner {
		s.pruneEntry(ctx, ps, e)
		return store.Sandbox{}, false
	}
	s.stored.mu.Lock()
	if s.stored.recs == nil {
		s.stored.recs = map[string]storedRec{}
	}
	if len(s.stored.recs) >= 4*maxStoredListed {
		clear(s.stored.recs)
	}
	s.stored.recs[e.ID] = storedRec{at: e.At, rec: rec}
	s.stored.mu.Unlock()
	return rec, true
}

// pruneEntry removes index entry e, whose record is gone (a daemon that
// died between removing the record and the entry, or ended the sandbox
// before the index was written) or is another key's: otherwise every
// listing of its key reads the record again. A pause writes its record
// before its entry, so the record is read once more after the removal:
// a pause of that sandbox meanwhile (its entry possibly the one removed)
// has its entry put back. Three requests, once per stale entry.
func (s *Supervisor) pruneEntry(ctx context.Context, ps pauseStore, e s3store.PausedEntry) {
	if err := ps.UnindexPaused(ctx, e.Owner, e.ID); err != nil {
		s.log.Warn("remove a stale entry of the object store's index of paused sandboxes", "sandbox_id", e.ID, "key", e.Owner, "err", err)
		return
	}
	s.log.Info("a stale entry of the object store's index of paused sandboxes is removed", "sandbox_id", e.ID, "key", e.Owner)
	if rec, ok, err := readStored(ctx, ps, e.ID); err == nil && ok && rec.Owner == e.Owner {
		if err := ps.IndexPaused(ctx, e.Owner, e.ID); err != nil {
			s.log.Warn("put back an entry of the object store's index of paused sandboxes", "sandbox_id", e.ID, "err", err)
		}
	}
	s.forgetStored(e.ID)
}

// killStored deletes sandbox id, which this daemon does not hold, when
// the object store has it paused: its record and content go under a
// claim, as a resume takes them (the daemon that paused it learns at its
// own resume that it is gone). ok false: the store has no such sandbox.
func (s *Supervisor) killStored(ctx context.Context, c Caller, id string) (ok bool, err error) {
	ps := s.pausedStore()
	if ps == nil {
		return false, nil
	}
	rec, ok, err := readStored(ctx, ps, id)
	if err != nil || !ok {
		return false, err
	}
	if err := allowed(c, rec); err != nil {
		return true, err
	}
	release, err := s.claimPause(ctx, rec, false)
	if errors.Is(err, errMoved) {
		return false, nil
	}
	if err != nil {
		return true, fmt.Errorf("delete sandbox %s: %w", id, err)
	}
	defer release(context.WithoutCancel(ctx))
	s.dropStored(context.WithoutCancel(ctx), id, rec.Owner, rec.Paused.Stored)
	s.recordAfter(ctx, audit.Event{Kind: audit.KindDestroy, Key: c.KeyID, Sandbox: id, Reason: "deleted: paused on another daemon, removed from " + rec.Paused.Stored.Where})
	s.log.Info("a sandbox paused by another daemon is deleted from the object store", "sandbox_id", id, "where", rec.Paused.Stored.Where)
	return true, nil
}
