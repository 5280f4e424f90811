package supervisor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
	"github.com/airlock-sandbox/airlock/internal/snapshot/s3store"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// Pause images in the object store (decision 83). Where the snapshot
// store is the object store ([snapshots] store = "s3"), a pause puts its
// image there too, with the snapshots' own upload and download
// (snapshot.Store's PutBlob and OpenBlob), each file as content of a
// namespace of that pause alone, and the sandbox's record beside them:
// another daemon on the same bucket and prefix resumes it (Resume finds
// the record when the sandbox is not one of its own). The local copy
// stays, for a resume here without a download, until the sandbox is
// resumed or ends. The record in the bucket says who holds the pause:
// a resume takes it away first (claim), so a daemon that still lists the
// sandbox paused after another resumed it finds it gone and forgets it.
// The pause's BLAKE3 digests guard the image wherever it comes from.

// pauseStore is a snapshot store that keeps paused sandboxes too
// (s3store.Store).
type pauseStore interface {
	snapshot.Store
	Where() string
	PutPaused(ctx context.Context, id string, rec []byte) error
	GetPaused(ctx context.Context, id string) ([]byte, error)
	DeletePaused(ctx context.Context, id string) error
	DeleteBlob(ctx context.Context, ns, digest string) error
	IndexPaused(ctx context.Context, owner, id string) error
	UnindexPaused(ctx context.Context, owner, id string) error
	ListPaused(ctx context.Context, owner string, max int) ([]s3store.PausedEntry, error)
	ClaimPaused(ctx context.Context, id string, ttl time.Duration) (func(context.Context), error)
}

// pausedStore is the store pause images go to beside the daemon's disk,
// or nil.
func (s *Supervisor) pausedStore() pauseStore {
	ps, _ := s.opts.Snapshots.(pauseStore)
	return ps
}

// pauseNS is the namespace of the content of one pause: no snapshot
// shares it, so its content goes when the pause does.
func pauseNS(id, gen string) string { return "paused\x00" + id + "\x00" + gen }

// storePause puts the image of rec's pause p, in dir, into the object
// store with rec's record (paused, with p), and sets p.Stored. Nothing
// stays in the store on an error.
func (s *Supervisor) storePause(ctx context.Context, ps pauseStore, rec store.Sandbox, p *store.Paused, dir string) (err error) {
	var g [12]byte
	_, _ = rand.Read(g[:])
	sp := &store.StoredPause{Where: ps.Where(), Gen: hex.EncodeToString(g[:]), Blobs: map[string]string{}}
	ns := pauseNS(rec.ID, sp.Gen)
	defer func() {
		if err != nil {
			s.dropBlobs(context.WithoutCancel(ctx), ps, rec.ID, sp)
		}
	}()
	for _, name := range slices.Sorted(maps.Keys(p.Digests)) {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		d, _, err := ps.PutBlob(ctx, ns, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		sp.Blobs[name] = d
	}
	p.Stored = sp
	rec.State, rec.Paused = store.StatePaused, p
	b, err := json.Marshal(rec)
	if err != nil {
		p.Stored = nil
		return err
	}
	if err := ps.PutPaused(ctx, rec.ID, b); err != nil {
		p.Stored = nil
		return err
	}
	if rec.Owner != "" {
		if err := ps.IndexPaused(ctx, rec.Owner, rec.ID); err != nil {
			_ = ps.DeletePaused(context.WithoutCancel(ctx), rec.ID)
			p.Stored = nil
			return err
		}
	}
	return nil
}

// dropBlobs removes the content of pause sp of sandbox id.
func (s *Supervisor) dropBlobs(ctx context.Context, ps pauseStore, id string, sp *store.StoredPause) {
	ns := pauseNS(id, sp.Gen)
	for name, d := range sp.Blobs {
		if err := ps.DeleteBlob(ctx, ns, d); err != nil {
			s.log.Warn("remove a paused sandbox's image from the object store", "sandbox_id", id, "file", name, "err", err)
		}
	}
}

// fetchPause downloads the image of pause p of sandbox id from the
// object store into dir (made anew) and checks its digests.
func fetchPause(ctx context.Context, ps pauseStore, id string, p *store.Paused, dir string) error {
	sp := p.Stored
	if len(sp.Blobs) != len(p.Digests) {
		return fmt.Errorf("its record in %s names %d files, its digests %d", sp.Where, len(sp.Blobs), len(p.Digests))
	}
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ns := pauseNS(id, sp.Gen)
	for name, d := range sp.Blobs {
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
			return fmt.Errorf("its record names a file %q", name)
		}
		if err := fetchBlob(ctx, ps, ns, d, filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("download %s: %w", name, err)
		}
	}
	return checkDigests(dir, p.Digests)
}

func fetchBlob(ctx context.Context, ps pauseStore, ns, digest, path string) error {
	rc, err := ps.OpenBlob(ctx, ns, digest)
	if err != nil {
		return err
	}
	defer rc.Close()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// readyImage makes sure paused rec's image in dir matches its digests:
// the local copy when it does, else the object store's, downloaded.
func (s *Supervisor) readyImage(ctx context.Context, rec store.Sandbox, dir string) error {
	p := rec.Paused
	err := checkDigests(dir, p.Digests)
	ps := s.pausedStore()
	if err == nil || p.Stored == nil || ps == nil {
		return err
	}
	if _, serr := os.Stat(dir); serr == nil {
		s.log.Warn("a paused sandbox's local image does not match its digests: the object store's is downloaded", "sandbox_id", rec.ID, "err", err)
	}
	if err := fetchPause(ctx, ps, rec.ID, p, dir); err != nil {
		return fmt.Errorf("its copy in %s: %w", p.Stored.Where, err)
	}
	return nil
}

// adoptPaused takes up sandbox id, unknown here, paused by another daemon
// sharing the object store: its record is read from there, its image
// downloaded and checked, and it is recorded here as a paused sandbox of
// this daemon. Nil, nil: the store has no such sandbox.
func (s *Supervisor) adoptPaused(ctx context.Context, c Caller, id string) (*live, error) {
	ps := s.pausedStore()
	if ps == nil {
		return nil, nil
	}
	b, err := ps.GetPaused(ctx, id)
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("resume sandbox %s: %w", id, err)
	}
	var rec store.Sandbox
	if err := json.Unmarshal(b, &rec); err != nil || rec.ID != id || rec.State != store.StatePaused || rec.Paused == nil || rec.Paused.Stored == nil || rec.Paused.MemoryKept {
		return nil, fmt.Errorf("resume sandbox %s: %w: its record in %s is not a paused sandbox's", id, sandbox.ErrInvalid, ps.Where())
	}
	if err := allowed(c, rec); err != nil {
		return nil, err
	}
	if _, ok := s.opts.Drivers[rec.Driver].(sandbox.Pauser); !ok {
		return nil, fmt.Errorf("resume sandbox %s: %w: it was paused on driver %s, which this daemon cannot resume", id, sandbox.ErrUnsupported, rec.Driver)
	}
	if _, ok := s.templates[rec.Template]; !ok {
		return nil, fmt.Errorf("resume sandbox %s: %w: its template %q is not one of this daemon's", id, sandbox.ErrInvalid, rec.Template)
	}
	dir := s.pausedDir(id)
	if err := fetchPause(ctx, ps, id, rec.Paused, dir); err != nil {
		_ = os.RemoveAll(dir)
		s.log.Error("a paused sandbox's image in the object store does not match its digests", "sandbox_id", id, "err", err)
		return nil, fmt.Errorf("resume sandbox %s: %w: its pause image in %s was changed or cut short since the pause (%w); it stays paused there", id, sandbox.ErrInvalid, rec.Paused.Stored.Where, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.live[id]; l != nil {
		return l, nil // adopted meanwhile
	}
	if err := s.store.PutSandbox(rec); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("resume sandbox %s: record it: %w", id, err)
	}
	l := &live{rec: rec, owner: rec.Owner, procs: map[string]*proc{}}
	l.touch(rec.Paused.At)
	s.live[id] = l
	s.log.Info("a sandbox paused by another daemon is taken up from the object store", "sandbox_id", id, "where", rec.Paused.Stored.Where)
	return l, nil
}

// errMoved says a paused sandbox's record left the object store: another
// daemon resumed it or ended it.
var errMoved = errors.New("moved")

// claimTTL is how long a claim on a paused sandbox in the object store
// keeps other daemons out: longer than a daemon holds one (a resume's
// pauseTimeout and a few requests after), with room for the daemons'
// clocks to differ by minutes. A claim older is one a daemon left as it
// died, and is taken over.
const claimTTL = pauseTimeout + 5*time.Minute

// claimPause takes paused rec's record out of the object store before
// its resume or its end, under a claim (s3store.ClaimPaused) so that of
// daemons doing so at once one does; release ends the claim, once the
// resume is done or the record is back. errMoved: it is no longer this
// daemon's; an error wrapping ErrBusy: another daemon is taking it up.
func (s *Supervisor) claimPause(ctx context.Context, rec store.Sandbox) (release func(context.Context), err error) {
	release = func(context.Context) {}
	ps, sp := s.pausedStore(), rec.Paused.Stored
	if ps == nil || sp == nil {
		return release, nil
	}
	held, err := ps.ClaimPaused(ctx, rec.ID, claimTTL)
	if errors.Is(err, s3store.ErrClaimed) {
		return nil, fmt.Errorf("%w: it is being resumed by another daemon sharing %s (%w)", ErrBusy, sp.Where, err)
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			held(context.WithoutCancel(ctx))
		}
	}()
	b, err := ps.GetPaused(ctx, rec.ID)
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil, errMoved
	}
	if err != nil {
		return nil, err
	}
	var there store.Sandbox
	if json.Unmarshal(b, &there) != nil || there.Paused == nil || there.Paused.Stored == nil || there.Paused.Stored.Gen != sp.Gen {
		return nil, errMoved
	}
	if err := ps.DeletePaused(ctx, rec.ID); err != nil {
		return nil, err
	}
	if err := ps.UnindexPaused(ctx, there.Owner, rec.ID); err != nil {
		s.log.Warn("remove a paused sandbox from the object store's index", "sandbox_id", rec.ID, "err", err)
	}
	s.forgetStored(rec.ID)
	return held, nil
}

// unclaimPause puts paused rec's record back after a resume that failed.
func (s *Supervisor) unclaimPause(ctx context.Context, rec store.Sandbox) {
	ps := s.pausedStore()
	if ps == nil || rec.Paused.Stored == nil {
		return
	}
	b, err := json.Marshal(rec)
	if err == nil {
		err = ps.PutPaused(ctx, rec.ID, b)
	}
	if err == nil && rec.Owner != "" {
		err = ps.IndexPaused(ctx, rec.Owner, rec.ID)
	}
	if err != nil {
		s.log.Error("put a paused sandbox's record back in the object store", "sandbox_id", rec.ID, "err", err)
	}
}

// unstorePause removes what paused rec stored in the object store: its
// content, and its record while it is still this pause's (one another
// daemon took is left alone).
func (s *Supervisor) unstorePause(ctx context.Context, rec store.Sandbox, claimed bool) {
	ps, sp := s.pausedStore(), rec.Paused.Stored
	if ps == nil || sp == nil {
		return
	}
	if !claimed {
		release, err := s.claimPause(ctx, rec)
		if err != nil {
			return
		}
		defer release(ctx)
	}
	s.dropBlobs(ctx, ps, rec.ID, sp)
}

// unadopt undoes adoptPaused for l, which another daemon is resuming
// meanwhile: its record and the image downloaded go (the driver has
// nothing of it yet), and this daemon knows it by the bucket again.
func (s *Supervisor) unadopt(l *live) {
	l.mu.Lock()
	id := l.rec.ID
	l.ending, l.rec.State = true, store.StateDestroyed // a resume waiting on it finds it gone
	l.mu.Unlock()
	s.mu.Lock()
	if s.live[id] == l {
		delete(s.live, id)
	}
	s.mu.Unlock()
	_ = os.RemoveAll(s.pausedDir(id))
	if err := s.store.DeleteSandbox(id); err != nil {
		s.log.Warn("forget a paused sandbox another daemon is resuming", "sandbox_id", id, "err", err)
	}
}

// forgetMoved forgets paused sandbox l, which another daemon sharing the
// object store resumed or ended: its local image and driver state go,
// its record here ends ("moved"). What it has in the store (its
// snapshots, the image) is the other daemon's now: left alone.
func (s *Supervisor) forgetMoved(ctx context.Context, l *live) {
	l.mu.Lock()
	if l.ending {
		l.mu.Unlock()
		return
	}
	l.ending = true
	rec := l.rec
	l.mu.Unlock()
	if p, ok := s.opts.Drivers[rec.Driver].(sandbox.Pauser); ok && rec.Paused != nil {
		if err := p.Discard(ctx, rec.ID, rec.Paused.DriverState); err != nil {
			s.log.Warn("discard a paused sandbox that moved", "sandbox_id", rec.ID, "err", err)
		}
	}
	_ = os.RemoveAll(s.pausedDir(rec.ID))
	why := "another daemon sharing the object store resumed or ended it"
	if _, err := s.store.UpdateSandbox(rec.ID, func(r *store.Sandbox) error {
		r.State, r.Ended, r.EndReason, r.EndMessage = store.StateDestroyed, s.opts.Now().UTC(), "moved", why
		return nil
	}); err != nil {
		s.log.Error("record the end of a sandbox", "sandbox_id", rec.ID, "err", err)
	}
	s.mu.Lock()
	if s.live[rec.ID] == l {
		delete(s.live, rec.ID)
	}
	s.mu.Unlock()
	s.recordAfter(ctx, audit.Event{Kind: audit.KindDestroy, Key: l.owner, Sandbox: rec.ID, Reason: "moved: " + why})
	s.log.Info("paused sandbox moved to another daemon", "sandbox_id", rec.ID)
}
