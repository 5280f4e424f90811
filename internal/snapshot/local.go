package snapshot

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Local is a Store on the daemon's local disk:
//
//	DIR/blobs/NS/ab/cdef…   content, named by its SHA-256 (NS is a hash of the owner)
//	DIR/snapshots/ID.json   a snapshot: its Info and its entries
//
// Every file is written to a temporary name and renamed into place, so a
// crash leaves whole files only. Content no snapshot refers to any more is
// removed when the last snapshot holding it is deleted, unless it was
// stored or asked for within the last blobGrace (a snapshot being taken
// may be about to refer to it); Collect sweeps what is left.
type Local struct {
	dir string

	mu    sync.Mutex
	infos map[string]Info
	// refs counts, per namespace, the snapshots that hold each digest;
	// sizes are the stored digests' sizes. Loaded per namespace on first
	// use.
	refs  map[string]map[string]int
	sizes map[string]map[string]int64
	cache *manifestCache
}

// blobGrace is how long content that no snapshot holds is kept.
const blobGrace = 10 * time.Minute

var _ Store = (*Local)(nil)

// OpenLocal opens (making it if needed) the store in dir.
func OpenLocal(dir string) (*Local, error) {
	for _, d := range []string{"blobs", "snapshots", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("open the snapshot store: %w", err)
		}
	}
	l := &Local{dir: dir, infos: map[string]Info{}, refs: map[string]map[string]int{}, sizes: map[string]map[string]int64{}, cache: newManifestCache(32)}
	ents, err := os.ReadDir(filepath.Join(dir, "snapshots"))
	if err != nil {
		return nil, fmt.Errorf("open the snapshot store: %w", err)
	}
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !ValidID(id) {
			continue
		}
		s, err := l.read(id)
		if err != nil {
			return nil, fmt.Errorf("open the snapshot store: %w", err)
		}
		l.infos[id] = s.Info
	}
	// Temporary files of a daemon that died are not content.
	tmp, _ := os.ReadDir(filepath.Join(dir, "tmp"))
	for _, e := range tmp {
		_ = os.Remove(filepath.Join(dir, "tmp", e.Name()))
	}
	return l, nil
}

// nsDir names a namespace's directory: a hash, so that no owner name
// becomes a path.
func nsDir(ns string) string {
	h := sha256.Sum256([]byte("airlock-snapshot-ns\x00" + ns))
	return hex.EncodeToString(h[:12])
}

func (l *Local) blobPath(ns, digest string) string {
	h := strings.TrimPrefix(digest, "sha256:")
	return filepath.Join(l.dir, "blobs", nsDir(ns), h[:2], h[2:])
}

// loadNS reads what namespace ns holds, once. l.mu is held.
func (l *Local) loadNS(ns string) error {
	if _, ok := l.refs[ns]; ok {
		return nil
	}
	refs, sizes := map[string]int{}, map[string]int64{}
	root := filepath.Join(l.dir, "blobs", nsDir(ns))
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(root, p)
			dg := "sha256:" + strings.ReplaceAll(rel, string(filepath.Separator), "")
			if sandbox.ValidDigest(dg) {
				if fi, err := d.Info(); err == nil {
					sizes[dg] = fi.Size()
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read the snapshot store: %w", err)
	}
	for id, in := range l.infos {
		if in.Owner != ns {
			continue
		}
		s, err := l.manifest(id)
		if err != nil {
			return err
		}
		for d := range digests(s.Entries) {
			refs[d]++
		}
	}
	l.refs[ns], l.sizes[ns] = refs, sizes
	return nil
}

// digests returns the set of file digests of entries.
func digests(entries []sandbox.TreeEntry) map[string]int64 {
	out := map[string]int64{}
	for _, e := range entries {
		if e.Type == sandbox.EntryFile {
			out[e.Digest] = e.Size
		}
	}
	return out
}

// HasBlob reports whether ns holds digest, and marks it used now.
func (l *Local) HasBlob(ctx context.Context, ns, digest string) (bool, error) {
	if !sandbox.ValidDigest(digest) {
		return false, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.loadNS(ns); err != nil {
		return false, err
	}
	if _, ok := l.sizes[ns][digest]; !ok {
		return false, nil
	}
	if l.refs[ns][digest] == 0 {
		// Kept from the sweep for blobGrace from now.
		now := time.Now()
		_ = os.Chtimes(l.blobPath(ns, digest), now, now)
	}
	return true, nil
}

// PutBlob stores r's content in ns.
func (l *Local) PutBlob(ctx context.Context, ns string, r io.Reader) (string, int64, error) {
	f, err := os.CreateTemp(filepath.Join(l.dir, "tmp"), "blob-")
	if err != nil {
		return "", 0, fmt.Errorf("store content: %w", err)
	}
	defer os.Remove(f.Name())
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", 0, fmt.Errorf("store content: %w", err)
	}
	digest := "sha256:" + hex.EncodeToString(h.Sum(nil))
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.loadNS(ns); err != nil {
		return "", 0, err
	}
	p := l.blobPath(ns, digest)
	if _, ok := l.sizes[ns][digest]; ok {
		now := time.Now()
		_ = os.Chtimes(p, now, now)
		return digest, n, nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", 0, fmt.Errorf("store content: %w", err)
	}
	if err := os.Rename(f.Name(), p); err != nil {
		return "", 0, fmt.Errorf("store content: %w", err)
	}
	l.sizes[ns][digest] = n
	return digest, n, nil
}

// OpenBlob opens content digest of ns.
func (l *Local) OpenBlob(ctx context.Context, ns, digest string) (io.ReadCloser, error) {
	if !sandbox.ValidDigest(digest) {
		return nil, fmt.Errorf("content %q: %w", clip(digest, 80), sandbox.ErrInvalid)
	}
	f, err := os.Open(l.blobPath(ns, digest))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("content %s is not in the store: %w", digest, sandbox.ErrNotFound)
	}
	return f, err
}

// Put records s.
func (l *Local) Put(ctx context.Context, s *Snapshot) error {
	if err := s.Check(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.infos[s.ID]; ok {
		return fmt.Errorf("snapshot %s: %w", s.ID, sandbox.ErrExists)
	}
	if err := l.loadNS(s.Owner); err != nil {
		return err
	}
	ds := digests(s.Entries)
	for d := range ds {
		if _, ok := l.sizes[s.Owner][d]; !ok {
			return fmt.Errorf("snapshot %s: content %s is not in the store: %w", s.ID, d, sandbox.ErrNotFound)
		}
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(l.dir, "snapshots", s.ID+".json"), b, filepath.Join(l.dir, "tmp")); err != nil {
		return fmt.Errorf("record snapshot %s: %w", s.ID, err)
	}
	for d := range ds {
		l.refs[s.Owner][d]++
	}
	l.infos[s.ID] = s.Info
	l.cache.put(s)
	return nil
}

// writeFile writes b to p through a temporary file in tmp.
func writeFile(p string, b []byte, tmp string) error {
	f, err := os.CreateTemp(tmp, "snap-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), p)
}

func (l *Local) read(id string) (*Snapshot, error) {
	b, err := os.ReadFile(filepath.Join(l.dir, "snapshots", id+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("snapshot %s: %w", id, sandbox.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read snapshot %s: %w", id, err)
	}
	var s Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("read snapshot %s: %w", id, err)
	}
	if s.ID != id {
		return nil, fmt.Errorf("read snapshot %s: it says it is %q", id, s.ID)
	}
	if err := s.Check(); err != nil {
		return nil, fmt.Errorf("read snapshot %s: %w", id, err)
	}
	return &s, nil
}

// manifest returns snapshot id, from the cache when it can. l.mu is held.
func (l *Local) manifest(id string) (*Snapshot, error) {
	if s := l.cache.get(id); s != nil {
		return s, nil
	}
	s, err := l.read(id)
	if err != nil {
		return nil, err
	}
	l.cache.put(s)
	return s, nil
}

// Get returns snapshot id. The caller must not change it.
func (l *Local) Get(ctx context.Context, id string) (*Snapshot, error) {
	if !ValidID(id) {
		return nil, fmt.Errorf("snapshot %q: %w", clip(id, 40), sandbox.ErrNotFound)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.infos[id]; !ok {
		return nil, fmt.Errorf("snapshot %s: %w", id, sandbox.ErrNotFound)
	}
	return l.manifest(id)
}

// List describes owner's snapshots, oldest first.
func (l *Local) List(ctx context.Context, owner string) ([]Info, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Info
	for _, in := range l.infos {
		if owner == "" || in.Owner == owner {
			out = append(out, in)
		}
	}
	slices.SortFunc(out, func(a, b Info) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// Delete removes snapshot id and the content only it held.
func (l *Local) Delete(ctx context.Context, id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	in, ok := l.infos[id]
	if !ok {
		return fmt.Errorf("snapshot %s: %w", id, sandbox.ErrNotFound)
	}
	if err := l.loadNS(in.Owner); err != nil {
		return err
	}
	s, err := l.manifest(id)
	if err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(l.dir, "snapshots", id+".json")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	delete(l.infos, id)
	l.cache.drop(id)
	refs := l.refs[in.Owner]
	for d := range digests(s.Entries) {
		refs[d]--
		if refs[d] > 0 {
			continue
		}
		delete(refs, d)
		l.removeBlob(in.Owner, d, false)
	}
	return nil
}

// removeBlob removes content no snapshot holds, unless it is recent
// (force: whatever its age). l.mu is held.
func (l *Local) removeBlob(ns, digest string, force bool) {
	p := l.blobPath(ns, digest)
	fi, err := os.Stat(p)
	if err != nil || (!force && time.Since(fi.ModTime()) < blobGrace) {
		return
	}
	if os.Remove(p) == nil {
		delete(l.sizes[ns], digest)
	}
}

// Collect removes ns's content that no snapshot holds and that was not
// used within blobGrace.
func (l *Local) Collect(ctx context.Context, ns string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.loadNS(ns); err != nil {
		return err
	}
	for d := range l.sizes[ns] {
		if l.refs[ns][d] == 0 {
			l.removeBlob(ns, d, false)
		}
	}
	return nil
}

// Usage says what owner's snapshots hold: their number, and the bytes of
// their content, each digest once.
func (l *Local) Usage(ctx context.Context, owner string) (Usage, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var u Usage
	for _, in := range l.infos {
		if in.Owner == owner {
			u.Snapshots++
		}
	}
	if err := l.loadNS(owner); err != nil {
		return u, err
	}
	for _, n := range l.sizes[owner] {
		u.Bytes += n
	}
	return u, nil
}

// manifestCache keeps the most recently used snapshots in memory.
type manifestCache struct {
	max   int
	order *list.List
	items map[string]*list.Element
}

func newManifestCache(max int) *manifestCache {
	return &manifestCache{max: max, order: list.New(), items: map[string]*list.Element{}}
}

func (c *manifestCache) get(id string) *Snapshot {
	if e, ok := c.items[id]; ok {
		c.order.MoveToFront(e)
		return e.Value.(*Snapshot)
	}
	return nil
}

func (c *manifestCache) put(s *Snapshot) {
	if e, ok := c.items[s.ID]; ok {
		e.Value = s
		c.order.MoveToFront(e)
		return
	}
	c.items[s.ID] = c.order.PushFront(s)
	for c.order.Len() > c.max {
		e := c.order.Back()
		c.order.Remove(e)
		delete(c.items, e.Value.(*Snapshot).ID)
	}
}

func (c *manifestCache) drop(id string) {
	if e, ok := c.items[id]; ok {
		c.order.Remove(e)
		delete(c.items, id)
	}
}
