// Package s3store is a snapshot.Store in an S3-compatible bucket, laid out
// like the local store so that every daemon that names the same bucket and
// prefix shares the snapshots (a snapshot taken on one host forks on
// another):
//
//	PREFIX/blobs/NS/ab/cdef…       content, named by its SHA-256 (NS: a hash of the owner)
//	PREFIX/snapshots/ID.json       a snapshot: its Info and its entries
//	PREFIX/info/NS/ID.json         its Info alone, which List reads
//	PREFIX/tmp/…                   content being uploaded (over one part)
//
// Snapshots never change once stored, so this store keeps what it has read
// in memory and lists only to learn of new ones. Content no snapshot
// refers to is removed when the last snapshot of its owner holding it is
// deleted, unless it was stored or confirmed within blobGrace: a snapshot
// being taken (here or on another daemon) may be about to refer to it.
package s3store

import (
	"bytes"
	"container/list"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/objstore"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
)

// Store keeps snapshots in a bucket.
type Store struct {
	c      *objstore.Client
	bucket string
	prefix string

	mu    sync.Mutex
	infos map[string]snapshot.Info
	// seen is when content was last confirmed in the bucket, per
	// namespace and digest, with a LastModified within blobGrace/2 then.
	seen  map[string]map[string]time.Time
	cache *manifests
}

var _ snapshot.Store = (*Store)(nil)

// blobGrace is how long content no snapshot holds is kept; confirmed
// content is kept for at least half of it after its confirmation. (A
// variable for the tests.)
var blobGrace = 10 * time.Minute

// maxManifest bounds a snapshot's JSON (a million entries).
const maxManifest = 512 << 20

// maxCopy is S3's limit on one server-side copy: larger content cannot
// be stored by this store.
const maxCopy = 5 << 30

// Open opens the store in bucket under prefix ("" or "a/path/"), checking
// that the bucket answers to the client's credentials.
func Open(ctx context.Context, c *objstore.Client, bucket, prefix string) (*Store, error) {
	if err := objstore.CheckBucket(bucket); err != nil {
		return nil, err
	}
	prefix = strings.Trim(prefix, "/")
	if prefix != "" {
		prefix += "/"
	}
	if err := c.Ping(ctx, bucket); err != nil {
		return nil, fmt.Errorf("open the snapshot store s3://%s/%s: %w", bucket, prefix, err)
	}
	s := &Store{c: c, bucket: bucket, prefix: prefix, infos: map[string]snapshot.Info{}, seen: map[string]map[string]time.Time{}, cache: newManifests(32)}
	// Uploads a daemon left behind when it died, long enough ago that no
	// daemon is still writing them.
	_ = c.List(ctx, bucket, prefix+"tmp/", func(o objstore.Object) error {
		if time.Since(o.LastModified) > time.Hour {
			_ = c.Delete(ctx, bucket, o.Key)
		}
		return nil
	})
	return s, nil
}

// Where names the store ("s3://bucket/prefix/").
func (s *Store) Where() string { return "s3://" + s.bucket + "/" + s.prefix }

// nsDir names a namespace: a hash, so that no owner name becomes a key.
func nsDir(ns string) string {
	h := sha256.Sum256([]byte("airlock-snapshot-ns\x00" + ns))
	return hex.EncodeToString(h[:12])
}

func (s *Store) blobKey(ns, digest string) string {
	h := strings.TrimPrefix(digest, "sha256:")
	return s.prefix + "blobs/" + nsDir(ns) + "/" + h[:2] + "/" + h[2:]
}

func (s *Store) manifestKey(id string) string { return s.prefix + "snapshots/" + id + ".json" }

func (s *Store) infoKey(ns, id string) string {
	return s.prefix + "info/" + nsDir(ns) + "/" + id + ".json"
}

// confirmed says whether ns's digest was confirmed recently enough that it
// outlives a Put made now.
func (s *Store) confirmed(ns, digest string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.seen[ns][digest]
	return ok && time.Since(t) < blobGrace/4
}

func (s *Store) confirm(ns, digest string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen[ns] == nil {
		s.seen[ns] = map[string]time.Time{}
	}
	s.seen[ns][digest] = time.Now()
}

// check looks content up in the bucket and, when it is there but old,
// stores it anew (a copy onto itself) so that a delete elsewhere keeps it
// for blobGrace from now.
func (s *Store) check(ctx context.Context, ns, digest string) (bool, error) {
	key := s.blobKey(ns, digest)
	_, mod, ok, err := s.c.Head(ctx, s.bucket, key)
	if err != nil || !ok {
		return false, err
	}
	if time.Since(mod) > blobGrace/2 {
		if err := s.touch(ctx, key); err != nil {
			return false, err
		}
	}
	s.confirm(ns, digest)
	return true, nil
}

// touch renews an object's LastModified.
func (s *Store) touch(ctx context.Context, key string) error {
	return s.c.Touch(ctx, s.bucket, key)
}

// HasBlob reports whether ns holds digest.
func (s *Store) HasBlob(ctx context.Context, ns, digest string) (bool, error) {
	if !sandbox.ValidDigest(digest) {
		return false, nil
	}
	if s.confirmed(ns, digest) {
		return true, nil
	}
	return s.check(ctx, ns, digest)
}

// PutBlob stores what r holds in ns. Content of one part goes straight to
// its key; longer content is uploaded to a temporary key while it is
// hashed, then copied to its key. Nothing is at the content's key until it
// is whole.
func (s *Store) PutBlob(ctx context.Context, ns string, r io.Reader) (string, int64, error) {
	buf := make([]byte, objstore.PartSize)
	n, err := io.ReadFull(r, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", 0, fmt.Errorf("store content: %w", err)
	}
	h := sha256.New()
	h.Write(buf[:n])
	if err != nil {
		digest := "sha256:" + hex.EncodeToString(h.Sum(nil))
		if ok, err := s.HasBlob(ctx, ns, digest); err != nil || ok {
			return digest, int64(n), err
		}
		if err := s.c.PutBytes(ctx, s.bucket, s.blobKey(ns, digest), buf[:n], "application/octet-stream", nil); err != nil {
			return "", 0, fmt.Errorf("store content: %w", err)
		}
		s.confirm(ns, digest)
		return digest, int64(n), nil
	}
	tmp := s.prefix + "tmp/blob-" + randHex()
	body := io.TeeReader(io.MultiReader(bytes.NewReader(buf[:n]), r), h)
	h.Reset()
	size, err := s.c.Put(ctx, objstore.Upload{Bucket: s.bucket, Key: tmp, ContentType: "application/octet-stream", Max: maxCopy}, body, nil)
	if err != nil {
		if errors.Is(err, objstore.ErrTooLarge) {
			return "", 0, fmt.Errorf("store content: a file over %d GiB cannot be kept in an object store snapshot: %w", maxCopy>>30, sandbox.ErrInvalid)
		}
		return "", 0, fmt.Errorf("store content: %w", err)
	}
	defer func() { _ = s.c.Delete(context.WithoutCancel(ctx), s.bucket, tmp) }()
	digest := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if ok, err := s.HasBlob(ctx, ns, digest); err != nil || ok {
		return digest, size, err
	}
	if err := s.c.Copy(ctx, s.bucket, tmp, s.blobKey(ns, digest)); err != nil {
		return "", 0, fmt.Errorf("store content: %w", err)
	}
	s.confirm(ns, digest)
	return digest, size, nil
}

// OpenBlob opens content digest of ns.
func (s *Store) OpenBlob(ctx context.Context, ns, digest string) (io.ReadCloser, error) {
	if !sandbox.ValidDigest(digest) {
		return nil, fmt.Errorf("content %q: %w", digest, sandbox.ErrInvalid)
	}
	rc, err := s.c.Open(ctx, s.bucket, s.blobKey(ns, digest))
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil, fmt.Errorf("content %s is not in the store: %w", digest, sandbox.ErrNotFound)
	}
	return rc, err
}

// Put records sn: its entries, then its Info (which makes it listed).
// Every file's content must be in its owner's namespace.
func (s *Store) Put(ctx context.Context, sn *snapshot.Snapshot) error {
	if err := sn.Check(); err != nil {
		return err
	}
	if _, _, ok, err := s.c.Head(ctx, s.bucket, s.manifestKey(sn.ID)); err != nil {
		return fmt.Errorf("record snapshot %s: %w", sn.ID, err)
	} else if ok {
		return fmt.Errorf("snapshot %s: %w", sn.ID, sandbox.ErrExists)
	}
	for _, e := range sn.Entries {
		if e.Type != sandbox.EntryFile || s.confirmed(sn.Owner, e.Digest) {
			continue
		}
		ok, err := s.check(ctx, sn.Owner, e.Digest)
		if err != nil {
			return fmt.Errorf("record snapshot %s: %w", sn.ID, err)
		}
		if !ok {
			return fmt.Errorf("snapshot %s: content %s is not in the store: %w", sn.ID, e.Digest, sandbox.ErrNotFound)
		}
	}
	b, err := json.Marshal(sn)
	if err != nil {
		return err
	}
	ib, err := json.Marshal(sn.Info)
	if err != nil {
		return err
	}
	if err := s.c.PutBytes(ctx, s.bucket, s.manifestKey(sn.ID), b, "application/json", nil); err != nil {
		return fmt.Errorf("record snapshot %s: %w", sn.ID, err)
	}
	if err := s.c.PutBytes(ctx, s.bucket, s.infoKey(sn.Owner, sn.ID), ib, "application/json", nil); err != nil {
		_ = s.c.Delete(context.WithoutCancel(ctx), s.bucket, s.manifestKey(sn.ID))
		return fmt.Errorf("record snapshot %s: %w", sn.ID, err)
	}
	s.mu.Lock()
	s.infos[sn.ID] = sn.Info
	s.cache.put(sn)
	s.mu.Unlock()
	return nil
}

// Get returns snapshot id. The caller must not change it.
func (s *Store) Get(ctx context.Context, id string) (*snapshot.Snapshot, error) {
	if !snapshot.ValidID(id) {
		return nil, fmt.Errorf("snapshot %q: %w", id, sandbox.ErrNotFound)
	}
	s.mu.Lock()
	sn := s.cache.get(id)
	s.mu.Unlock()
	if sn != nil {
		return sn, nil
	}
	b, err := s.c.GetBytes(ctx, s.bucket, s.manifestKey(id), maxManifest)
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil, fmt.Errorf("snapshot %s: %w", id, sandbox.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read snapshot %s: %w", id, err)
	}
	sn = &snapshot.Snapshot{}
	if err := json.Unmarshal(b, sn); err != nil {
		return nil, fmt.Errorf("read snapshot %s: %w", id, err)
	}
	if sn.ID != id {
		return nil, fmt.Errorf("read snapshot %s: it says it is %q", id, sn.ID)
	}
	if err := sn.Check(); err != nil {
		return nil, fmt.Errorf("read snapshot %s: %w", id, err)
	}
	s.mu.Lock()
	s.cache.put(sn)
	s.mu.Unlock()
	return sn, nil
}

// List describes owner's snapshots ("" for every owner), oldest first.
func (s *Store) List(ctx context.Context, owner string) ([]snapshot.Info, error) {
	prefix := s.prefix + "info/"
	if owner != "" {
		prefix += nsDir(owner) + "/"
	}
	var ids []string
	err := s.c.List(ctx, s.bucket, prefix, func(o objstore.Object) error {
		name := o.Key[strings.LastIndexByte(o.Key, '/')+1:]
		if id, ok := strings.CutSuffix(name, ".json"); ok && snapshot.ValidID(id) {
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	out := make([]snapshot.Info, 0, len(ids))
	for _, id := range ids {
		s.mu.Lock()
		in, ok := s.infos[id]
		s.mu.Unlock()
		if !ok {
			var err error
			if in, err = s.readInfo(ctx, prefix, id); errors.Is(err, sandbox.ErrNotFound) {
				continue // deleted since the listing
			} else if err != nil {
				return nil, err
			}
		}
		if owner == "" || in.Owner == owner {
			out = append(out, in)
		}
	}
	slices.SortFunc(out, func(a, b snapshot.Info) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// readInfo reads an Info found under prefix (owner's, or every owner's).
func (s *Store) readInfo(ctx context.Context, prefix, id string) (snapshot.Info, error) {
	var in snapshot.Info
	var key string
	if strings.HasSuffix(prefix, "info/") {
		// Every owner: the key has the namespace; find it again.
		err := s.c.List(ctx, s.bucket, prefix, func(o objstore.Object) error {
			if strings.HasSuffix(o.Key, "/"+id+".json") {
				key = o.Key
			}
			return nil
		})
		if err != nil {
			return in, err
		}
	} else {
		key = prefix + id + ".json"
	}
	b, err := s.c.GetBytes(ctx, s.bucket, key, 1<<20)
	if err != nil {
		return in, fmt.Errorf("read snapshot %s: %w", id, err)
	}
	if err := json.Unmarshal(b, &in); err != nil {
		return in, fmt.Errorf("read snapshot %s: its description: %w", id, err)
	}
	if in.ID != id {
		return in, fmt.Errorf("read snapshot %s: its description says it is %q", id, in.ID)
	}
	s.mu.Lock()
	s.infos[id] = in
	s.mu.Unlock()
	return in, nil
}

// Delete removes snapshot id and the content no other snapshot of its
// owner holds (unless it is recent).
func (s *Store) Delete(ctx context.Context, id string) error {
	sn, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	if err := s.c.Delete(ctx, s.bucket, s.infoKey(sn.Owner, id)); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	if err := s.c.Delete(ctx, s.bucket, s.manifestKey(id)); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	s.mu.Lock()
	delete(s.infos, id)
	s.cache.drop(id)
	s.mu.Unlock()
	// What the owner's other snapshots hold stays.
	others, err := s.List(ctx, sn.Owner)
	if err != nil {
		return nil // the snapshot is gone; its content waits for the next delete
	}
	held := map[string]bool{}
	for _, in := range others {
		o, err := s.Get(ctx, in.ID)
		if err != nil {
			return nil
		}
		for _, e := range o.Entries {
			if e.Type == sandbox.EntryFile {
				held[e.Digest] = true
			}
		}
	}
	for _, e := range sn.Entries {
		if e.Type != sandbox.EntryFile || held[e.Digest] {
			continue
		}
		held[e.Digest] = true // once
		key := s.blobKey(sn.Owner, e.Digest)
		if _, mod, ok, err := s.c.Head(ctx, s.bucket, key); err == nil && ok && time.Since(mod) > blobGrace {
			if s.c.Delete(ctx, s.bucket, key) == nil {
				s.mu.Lock()
				delete(s.seen[sn.Owner], e.Digest)
				s.mu.Unlock()
			}
		}
	}
	return nil
}

// Usage says what owner's snapshots hold: their number, and the bytes of
// the content of owner's namespace.
func (s *Store) Usage(ctx context.Context, owner string) (snapshot.Usage, error) {
	var u snapshot.Usage
	err := s.c.List(ctx, s.bucket, s.prefix+"info/"+nsDir(owner)+"/", func(o objstore.Object) error {
		if strings.HasSuffix(o.Key, ".json") {
			u.Snapshots++
		}
		return nil
	})
	if err != nil {
		return u, fmt.Errorf("count snapshots: %w", err)
	}
	err = s.c.List(ctx, s.bucket, s.prefix+"blobs/"+nsDir(owner)+"/", func(o objstore.Object) error {
		u.Bytes += o.Size
		return nil
	})
	if err != nil {
		return u, fmt.Errorf("count snapshots' content: %w", err)
	}
	return u, nil
}

func randHex() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// manifests keeps the most recently used snapshots in memory.
type manifests struct {
	max   int
	order *list.List
	items map[string]*list.Element
}

func newManifests(max int) *manifests {
	return &manifests{max: max, order: list.New(), items: map[string]*list.Element{}}
}

func (c *manifests) get(id string) *snapshot.Snapshot {
	if e, ok := c.items[id]; ok {
		c.order.MoveToFront(e)
		return e.Value.(*snapshot.Snapshot)
	}
	return nil
}

func (c *manifests) put(s *snapshot.Snapshot) {
	if e, ok := c.items[s.ID]; ok {
		e.Value = s
		c.order.MoveToFront(e)
		return
	}
	c.items[s.ID] = c.order.PushFront(s)
	for c.order.Len() > c.max {
		e := c.order.Back()
		c.order.Remove(e)
		delete(c.items, e.Value.(*snapshot.Snapshot).ID)
	}
}

func (c *manifests) drop(id string) {
	if e, ok := c.items[id]; ok {
		c.order.Remove(e)
		delete(c.items, id)
	}
}

// Paused sandboxes: a daemon that pauses a sandbox while its snapshots
// are in the bucket stores the pause image's files there too, as content
// of a namespace of that pause alone (PutBlob, OpenBlob, DeleteBlob), and
// its record beside the snapshots, so that another daemon on the same
// bucket and prefix can resume it:
//
//	PREFIX/paused/ID.json          a paused sandbox's record (the supervisor's JSON)

// maxPausedRecord bounds a paused sandbox's record.
const maxPausedRecord = 4 << 20

func (s *Store) pausedKey(id string) string { return s.prefix + "paused/" + id + ".json" }

// PutPaused stores paused sandbox id's record.
func (s *Store) PutPaused(ctx context.Context, id string, rec []byte) error {
	if !sandbox.ValidID(id) {
		return fmt.Errorf("store paused sandbox %q: %w", id, sandbox.ErrInvalid)
	}
	if err := s.c.PutBytes(ctx, s.bucket, s.pausedKey(id), rec, "application/json", nil); err != nil {
		return fmt.Errorf("store paused sandbox %s's record: %w", id, err)
	}
	return nil
}

// GetPaused reads paused sandbox id's record: an error wrapping
// sandbox.ErrNotFound when the bucket has none.
func (s *Store) GetPaused(ctx context.Context, id string) ([]byte, error) {
	if !sandbox.ValidID(id) {
		return nil, fmt.Errorf("paused sandbox %q: %w", id, sandbox.ErrNotFound)
	}
	b, err := s.c.GetBytes(ctx, s.bucket, s.pausedKey(id), maxPausedRecord)
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil, fmt.Errorf("paused sandbox %s is not in %s: %w", id, s.Where(), sandbox.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read paused sandbox %s's record: %w", id, err)
	}
	return b, nil
}

// DeletePaused removes paused sandbox id's record (none is not an error).
func (s *Store) DeletePaused(ctx context.Context, id string) error {
	if !sandbox.ValidID(id) {
		return fmt.Errorf("paused sandbox %q: %w", id, sandbox.ErrInvalid)
	}
	if err := s.c.Delete(ctx, s.bucket, s.pausedKey(id)); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		return fmt.Errorf("delete paused sandbox %s's record: %w", id, err)
	}
	return nil
}

// DeleteBlob removes content digest of ns at once (none is not an
// error). Only for namespaces of one user, a paused sandbox's: a
// snapshot's content goes with Delete, which checks what else holds it.
func (s *Store) DeleteBlob(ctx context.Context, ns, digest string) error {
	if !sandbox.ValidDigest(digest) {
		return fmt.Errorf("content %q: %w", digest, sandbox.ErrInvalid)
	}
	if err := s.c.Delete(ctx, s.bucket, s.blobKey(ns, digest)); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		return fmt.Errorf("delete content %s: %w", digest, err)
	}
	s.mu.Lock()
	delete(s.seen[ns], digest)
	s.mu.Unlock()
	return nil
}
