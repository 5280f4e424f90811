package s3store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/objstore"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Beside a paused sandbox's record (decision 85):
//
//	PREFIX/paused-by/OWNER/ID      empty: sandbox ID, paused, is of key OWNER (for lists)
//	PREFIX/claims/ID               a daemon is taking paused sandbox ID up (a resume, a delete)
//
// A list of one key's paused sandboxes is one listing of its prefix; a
// claim is a conditional write (If-None-Match: *), so of two daemons
// claiming one sandbox at once one wins.

var ownerPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// ownerDir is the index's folder of key owner ("" for every key).
func (s *Store) ownerDir(owner string) (string, error) {
	if owner == "" {
		return s.prefix + "paused-by/", nil
	}
	if !ownerPattern.MatchString(owner) || strings.Trim(owner, ".") == "" {
		return "", fmt.Errorf("paused sandboxes of key %q: %w", owner, sandbox.ErrInvalid)
	}
	return s.prefix + "paused-by/" + owner + "/", nil
}

// IndexPaused records that paused sandbox id is key owner's.
func (s *Store) IndexPaused(ctx context.Context, owner, id string) error {
	dir, err := s.ownerDir(owner)
	if err != nil || owner == "" || !sandbox.ValidID(id) {
		return fmt.Errorf("index paused sandbox %q of %q: %w", id, owner, sandbox.ErrInvalid)
	}
	return s.c.PutBytes(ctx, s.bucket, dir+id, nil, "application/octet-stream", nil)
}

// UnindexPaused removes what IndexPaused recorded (none is not an error).
func (s *Store) UnindexPaused(ctx context.Context, owner, id string) error {
	dir, err := s.ownerDir(owner)
	if err != nil || owner == "" || !sandbox.ValidID(id) {
		return nil
	}
	if err := s.c.Delete(ctx, s.bucket, dir+id); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		return err
	}
	return nil
}

// PausedEntry is one paused sandbox of a list: its id, its key, and when
// its index entry was written (a new pause writes a new one).
type PausedEntry struct {
	ID, Owner string
	At        time.Time
}

// ListPaused lists the paused sandboxes of key owner ("" for every key)
// that the index holds, at most max of them.
func (s *Store) ListPaused(ctx context.Context, owner string, max int) ([]PausedEntry, error) {
	dir, err := s.ownerDir(owner)
	if err != nil {
		return nil, err
	}
	var out []PausedEntry
	errFull := errors.New("full")
	err = s.c.List(ctx, s.bucket, dir, func(o objstore.Object) error {
		rest := strings.TrimPrefix(o.Key, s.prefix+"paused-by/")
		own, id, ok := strings.Cut(rest, "/")
		if !ok || !sandbox.ValidID(id) {
			return nil
		}
		if len(out) >= max {
			return errFull
		}
		out = append(out, PausedEntry{ID: id, Owner: own, At: o.LastModified})
		return nil
	})
	if err != nil && !errors.Is(err, errFull) {
		return nil, err
	}
	return out, nil
}

// ErrClaimed is what ClaimPaused returns while another daemon holds the
// claim.
var ErrClaimed = errors.New("another daemon is taking it up")

func (s *Store) claimKey(id string) string { return s.prefix + "claims/" + id }

// ClaimPaused claims paused sandbox id for this daemon: the claim object
// is written only where there is none (If-None-Match: *), or over one
// older than ttl (If-Match: its ETag), a claim left by a daemon that
// died. Another daemon's live claim: an error wrapping ErrClaimed.
// release removes the claim while it is still this one's.
func (s *Store) ClaimPaused(ctx context.Context, id string, ttl time.Duration) (release func(context.Context), err error) {
	var nb [16]byte
	_, _ = rand.Read(nb[:])
	return s.ClaimPausedAs(ctx, id, hex.EncodeToString(nb[:]), ttl)
}

// ClaimPausedAs is ClaimPaused with the claim's nonce given (a random
// string the daemon kept on its disk before the claim): a claim of that
// nonce already there is this daemon's own, left by a process of it that
// died while it held it, and is taken over at once, however young
// (decision 90).
func (s *Store) ClaimPausedAs(ctx context.Context, id, nonce string, ttl time.Duration) (release func(context.Context), err error) {
	if !sandbox.ValidID(id) || nonce == "" || len(nonce) > 64 {
		return nil, fmt.Errorf("claim paused sandbox %q: %w", id, sandbox.ErrInvalid)
	}
	now := time.Now().UTC()
	key := s.claimKey(id)
	u := objstore.Upload{Bucket: s.bucket, Key: key, ContentType: "text/plain", IfAbsent: true,
		Metadata: map[string]string{"claimed-at": now.Format(time.RFC3339Nano)}}
	err = s.c.PutBytesIf(ctx, u, []byte(nonce))
	if errors.Is(err, objstore.ErrChanged) {
		info, ok, serr := s.c.Stat(ctx, s.bucket, key)
		if serr != nil {
			return nil, serr
		}
		if ok {
			at, perr := time.Parse(time.RFC3339Nano, info.Metadata["claimed-at"])
			if perr == nil && now.Sub(at) < ttl && !s.claimOf(ctx, key, nonce) {
				return nil, fmt.Errorf("paused sandbox %s: %w (claimed at %s)", id, ErrClaimed, at.Format(time.RFC3339))
			}
			// Left by a daemon that died: taken over, by one daemon only.
			u.IfAbsent, u.IfMatch = false, info.ETag
		}
		err = s.c.PutBytesIf(ctx, u, []byte(nonce))
		if errors.Is(err, objstore.ErrChanged) || errors.Is(err, sandbox.ErrNotFound) {
			return nil, fmt.Errorf("paused sandbox %s: %w", id, ErrClaimed)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("claim paused sandbox %s: %w", id, err)
	}
	// Read back: a store that ignored the condition (501, stored
	// unconditionally) leaves the claim to the last writer.
	if !s.claimOf(ctx, key, nonce) {
		return nil, fmt.Errorf("paused sandbox %s: %w", id, ErrClaimed)
	}
	return func(ctx context.Context) {
		if s.claimOf(ctx, key, nonce) {
			_ = s.c.Delete(ctx, s.bucket, key)
		}
	}, nil
}

// claimOf says whether the claim at key is nonce's.
func (s *Store) claimOf(ctx context.Context, key, nonce string) bool {
	b, err := s.c.GetBytes(ctx, s.bucket, key, 64)
	return err == nil && bytes.Equal(b, []byte(nonce))
}
