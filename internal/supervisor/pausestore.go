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
	ClaimPausedAs(ctx context.Context, id, nonce string, ttl time.Duration) (func(context.Context), error)
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
	rec.State, rec.Paused, rec.Taking = store.StatePaused, p, nil
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
	rec.Taking = nil // another daemon's
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
// died, and is taken over. A variable for the tests.
var claimTTL = pauseTimeout + 5*time.Minute

// claimPause claims paused rec's pause in the object store before its
// resume or its end (s3store.ClaimPausedAs), so that of daemons doing so
// at once one does, and checks that the record there is still this
// pause's. The record and the image stay in the store until dropStored,
// once the resume is recorded (decision 90): a daemon that dies before
// leaves the sandbox paused there. For a resume (taking), the claim's
// nonce is first kept on the sandbox's record here (store.Taking), so
// that this daemon's next start takes its own claim over and finishes or
// undoes the take-up (finishTake); release ends the claim. errMoved: it
// is no longer this daemon's; an error wrapping ErrBusy: another daemon
// is taking it up.
func (s *Supervisor) claimPause(ctx context.Context, rec store.Sandbox, taking bool) (release func(context.Context), err error) {
	release = func(context.Context) {}
	ps, sp := s.pausedStore(), rec.Paused.Stored
	if ps == nil || sp == nil {
		return release, nil
	}
	var nb [16]byte
	_, _ = rand.Read(nb[:])
	nonce := hex.EncodeToString(nb[:])
	if taking {
		tk := &store.Taking{Pause: *sp, Claim: nonce}
		if _, err := s.store.UpdateSandbox(rec.ID, func(r *store.Sandbox) error { r.Taking = tk; return nil }); err != nil {
			return nil, fmt.Errorf("record the claim on it: %w", err)
		}
		defer func() {
			if err != nil {
				s.untake(rec.ID)
			}
		}()
	}
	held, err := ps.ClaimPausedAs(ctx, rec.ID, nonce, claimTTL)
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
	return held, nil
}

// dropStored removes pause sp of sandbox id, key owner's, from the
// object store under this daemon's claim: its record, its index entry,
// its content.
func (s *Supervisor) dropStored(ctx context.Context, id, owner string, sp *store.StoredPause) {
	ps := s.pausedStore()
	if ps == nil || sp == nil {
		return
	}
	if err := ps.DeletePaused(ctx, id); err != nil {
		s.log.Warn("remove a paused sandbox's record from the object store", "sandbox_id", id, "err", err)
	}
	if err := ps.UnindexPaused(ctx, owner, id); err != nil {
		s.log.Warn("remove a paused sandbox from the object store's index", "sandbox_id", id, "err", err)
	}
	s.step("dropped")
	s.dropBlobs(ctx, ps, id, sp)
	s.forgetStored(id)
}

// untake clears sandbox id's Taking, here and on its record: its take-up
// from the object store is done or undone.
func (s *Supervisor) untake(id string) {
	if _, err := s.store.UpdateSandbox(id, func(r *store.Sandbox) error { r.Taking = nil; return nil }); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		s.log.Warn("record a take-up from the object store done", "sandbox_id", id, "err", err)
	}
	s.mu.Lock()
	l := s.live[id]
	s.mu.Unlock()
	if l != nil {
		l.mu.Lock()
		l.rec.Taking = nil
		l.mu.Unlock()
	}
}

// finishTake, on the daemon's start, finishes or undoes the take-up of
// rec's pause from the object store that the previous daemon began and
// did not end (it died). Its claim there, by the nonce kept on rec, is
// taken over at once. A sandbox still paused here was not resumed: the
// pause stays in the store as it was, resumable here or anywhere, and
// the claim goes. One recorded running (or ended) was resumed here: the
// pause in the store is spent, and goes (its record while it is still
// that pause's). The store unreachable: rec is left as it is, for the
// next start; a claim another daemon took over since (stale): that
// daemon's now. Answers rec without Taking when done.
func (s *Supervisor) finishTake(ctx context.Context, rec store.Sandbox) store.Sandbox {
	tk := rec.Taking
	ps := s.pausedStore()
	if ps == nil {
		s.untake(rec.ID)
		rec.Taking = nil
		return rec
	}
	held, err := ps.ClaimPausedAs(ctx, rec.ID, tk.Claim, claimTTL)
	switch {
	case errors.Is(err, s3store.ErrClaimed):
		s.log.Warn("a take-up from the object store the previous daemon began: another daemon holds its claim now", "sandbox_id", rec.ID, "err", err)
	case err != nil:
		s.log.Error("a take-up from the object store the previous daemon began: left for the next start", "sandbox_id", rec.ID, "err", err)
		return rec
	case rec.State == store.StatePaused:
		s.log.Info("a resume from the object store the previous daemon began did not happen: the sandbox stays paused there", "sandbox_id", rec.ID)
	default:
		if there, ok, _ := readStored(ctx, ps, rec.ID); ok && there.Paused.Stored.Gen == tk.Pause.Gen {
			if err := ps.DeletePaused(ctx, rec.ID); err != nil {
				s.log.Warn("remove a paused sandbox's record from the object store", "sandbox_id", rec.ID, "err", err)
			}
		}
		if err := ps.UnindexPaused(ctx, rec.Owner, rec.ID); err != nil {
			s.log.Warn("remove a paused sandbox from the object store's index", "sandbox_id", rec.ID, "err", err)
		}
		s.dropBlobs(ctx, ps, rec.ID, &tk.Pause)
		_ = os.RemoveAll(s.pausedDir(rec.ID))
		s.log.Info("a resume from the object store the previous daemon made: its pause there is removed", "sandbox_id", rec.ID)
	}
	if held != nil {
		held(ctx)
	}
	s.untake(rec.ID)
	rec.Taking = nil
	return rec
}

// step is where a test stops a take-up from the object store, as a daemon
// that dies there would (Supervisor.takeStep).
func (s *Supervisor) step(name string) {
	if s.takeStep != nil {
		s.takeStep(name)
	}
}

// unstorePause removes what paused rec stored in the object store, under
// a claim: its record while it is still this pause's, and its content
// (one another daemon took is left alone).
func (s *Supervisor) unstorePause(ctx context.Context, rec store.Sandbox) {
	ps, sp := s.pausedStore(), rec.Paused.Stored
	if ps == nil || sp == nil {
		return
	}
	release, err := s.claimPause(ctx, rec, false)
	if err != nil {
		return
	}
	defer release(ctx)
	s.dropStored(ctx, rec.ID, rec.Owner, sp)
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
