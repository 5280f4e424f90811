// Package image pulls OCI and Docker images from registries (or loads them
// from archives) into a content-addressed cache of unpacked roots, which
// the drivers that compose their own root (native, gVisor) use as the
// sandbox's read-only root.
//
// The cache holds one directory per image, named by its manifest's digest:
//
//	DIR/roots/<sha256 hex>/rootfs      the unpacked layers
//	DIR/roots/<sha256 hex>/image.json  refs, digest, config (Env, WorkingDir, User), size
//	DIR/roots/<sha256 hex>/used        its mtime is when a sandbox last asked for it
//	DIR/tmp/                           unpacks in progress (renamed into roots/ when whole)
//	DIR/locks/<sha256 hex>             flocked while one process unpacks the image
//
// Layers are untrusted input: see Unpack. A root is renamed into place only
// once every layer is unpacked, so a half-unpacked root is never used. The
// cache is capped (Options.MaxBytes); past the cap the least recently used
// roots are removed.
package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sync/singleflight"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// DefaultMaxBytes is the cache's size cap when Options.MaxBytes is zero.
const DefaultMaxBytes = 20 << 30

// Options configure a Store. The zero value (with Dir set) pulls only over
// HTTPS, with the Docker config's credentials, for this host's platform.
type Options struct {
	// Dir is the cache's directory. Required.
	Dir string
	// MaxBytes caps the unpacked roots' total size; past it the least
	// recently used are removed after a pull. 0 means DefaultMaxBytes, a
	// negative value no cap.
	MaxBytes int64
	// Insecure lists registries ("host:port") that may be reached over
	// plain HTTP. None by default.
	Insecure []string
	// Limits bound what one image may unpack to; zero fields are the
	// defaults of Limits.
	Limits Limits
	// Keychain finds registry credentials; nil means the Docker config
	// file and its credential helpers, as docker finds them
	// (authn.DefaultKeychain).
	Keychain authn.Keychain
	// Transport carries registry requests; nil means
	// remote.DefaultTransport.
	Transport http.RoundTripper
	// Platform is the one an index is resolved to; nil means linux on
	// this host's architecture.
	Platform *v1.Platform
	// Logger receives the store's logs; nil discards them.
	Logger *slog.Logger
}

// Config is what of an image's configuration applies to a sandbox. Its
// Entrypoint and Cmd are kept for `airlock image ls` but never run: a
// sandbox runs the commands it is given.
type Config struct {
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	// User is the image's user; the workload always runs as airlock's
	// unprivileged user, whatever it says.
	User       string   `json:"user,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
}

// Image is one unpacked image of the cache.
type Image struct {
	// Digest is the manifest's digest ("sha256:…"), the cache's key.
	Digest string `json:"digest"`
	// Refs are the references it was pulled or loaded as.
	Refs   []string `json:"refs"`
	Config Config   `json:"config"`
	// Size is what its root takes, in bytes of file content.
	Size   int64     `json:"size"`
	Layers int       `json:"layers"`
	Pulled time.Time `json:"pulled"`
	// Root is the unpacked root directory (not stored).
	Root string `json:"-"`
	// Used is when a sandbox last asked for it (not stored).
	Used time.Time `json:"-"`
}

// Event is one step of a pull or load, for a progress display.
type Event struct {
	// Phase is "resolve" (asking the registry), "layer" (Layer of Layers
	// is being fetched and unpacked: Done of Total compressed bytes),
	// "cached" (nothing to fetch) or "done".
	Phase         string
	Ref           string
	Digest        string
	Layer, Layers int
	Done, Total   int64
}

// Progress receives a pull's events; it may be nil.
type Progress func(Event)

// Store is the cache of unpacked images in one directory.
type Store struct {
	opts     Options
	log      *slog.Logger
	flight   singleflight.Group
	mu       sync.Mutex // guards refs updates and eviction
	platform v1.Platform
}

// Open makes (or opens) the cache in opts.Dir.
func Open(opts Options) (*Store, error) {
	if opts.Dir == "" {
		return nil, errors.New("image cache: no directory")
	}
	for _, d := range []string{"roots", "tmp"} {
		if err := os.MkdirAll(filepath.Join(opts.Dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("image cache: %w", err)
		}
	}
	s := &Store{opts: opts, log: opts.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if opts.Platform != nil {
		s.platform = *opts.Platform
	} else {
		s.platform = v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	}
	s.sweepTmp()
	return s, nil
}

// sweepTmp removes unpacks abandoned over an hour ago (a process that
// died mid-pull); younger ones may belong to a pull in progress.
func (s *Store) sweepTmp() {
	dir := filepath.Join(s.opts.Dir, "tmp")
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > time.Hour {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// reference parses ref, letting it use plain HTTP only when its registry
// is configured as insecure.
func (s *Store) reference(ref string) (name.Reference, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", ref, err)
	}
	if slices.Contains(s.opts.Insecure, r.Context().RegistryStr()) {
		if r, err = name.ParseReference(ref, name.Insecure); err != nil {
			return nil, fmt.Errorf("image %q: %w", ref, err)
		}
	}
	return r, nil
}

func (s *Store) remoteOptions(ctx context.Context) []remote.Option {
	kc := s.opts.Keychain
	if kc == nil {
		kc = authn.DefaultKeychain
	}
	o := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(kc), remote.WithPlatform(s.platform),
		remote.WithUserAgent("airlock")}
	base := s.opts.Transport
	if base == nil {
		base = remote.DefaultTransport
	}
	return append(o, remote.WithTransport(&httpGuard{base: base, insecure: s.opts.Insecure}))
}

// httpGuard refuses plain-HTTP requests to a registry not configured as
// insecure: go-containerregistry itself falls back to HTTP for loopback,
// private (RFC 1918) and .local registries, and follows redirects and
// token realms wherever they point.
type httpGuard struct {
	base     http.RoundTripper
	insecure []string
}

// ErrInsecure is what a plain-HTTP request to a registry not configured as
// insecure fails with.
var ErrInsecure = errors.New("plain HTTP to a registry not configured as insecure")

func (g *httpGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" && !slices.Contains(g.insecure, req.URL.Host) {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("%s %s: %w (add it to the insecure registries to allow it)", req.Method, req.URL.Redacted(), ErrInsecure)
	}
	return g.base.RoundTrip(req)
}

// Get returns the image ref names from the cache, pulling it first when the
// cache has none of that name (as `docker run` does). Concurrent calls for
// one image pull it once.
func (s *Store) Get(ctx context.Context, ref string, p Progress) (*Image, error) {
	r, err := s.reference(ref)
	if err != nil {
		return nil, err
	}
	if img, err := s.lookup(r.Name()); err == nil {
		s.touch(img)
		if p != nil {
			p(Event{Phase: "cached", Ref: r.Name(), Digest: img.Digest})
		}
		return img, nil
	}
	return s.Pull(ctx, ref, p)
}

// Pull resolves ref with its registry and unpacks the image into the
// cache unless it is there already. Concurrent pulls of one reference
// resolve it once, and of one digest unpack it once.
func (s *Store) Pull(ctx context.Context, ref string, p Progress) (*Image, error) {
	r, err := s.reference(ref)
	if err != nil {
		return nil, err
	}
	ch := s.flight.DoChan("ref\x00"+r.Name(), func() (any, error) {
		// The pull outlives a caller that gives up: others may wait on it.
		return s.pull(context.WithoutCancel(ctx), r, p)
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return nil, res.Err
		}
		return res.Val.(*Image), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("pull %s: %w", r.Name(), ctx.Err())
	}
}

func (s *Store) pull(ctx context.Context, r name.Reference, p Progress) (*Image, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	if p != nil {
		p(Event{Phase: "resolve", Ref: r.Name()})
	}
	img, err := remote.Image(r, s.remoteOptions(ctx)...)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", r.Name(), err)
	}
	return s.add(ctx, r.Name(), img, p)
}

// add unpacks img into the cache (once per digest) and records ref as one
// of its names.
func (s *Store) add(ctx context.Context, ref string, img v1.Image, p Progress) (*Image, error) {
	d, err := img.Digest()
	if err != nil {
		return nil, fmt.Errorf("image %s: digest: %w", ref, err)
	}
	v, err, _ := s.flight.Do("digest\x00"+d.String(), func() (any, error) {
		// Another process pulling the same image: wait for it, then
		// find its root.
		unlock, err := s.lockDigest(d.Hex)
		if err != nil {
			return nil, err
		}
		defer unlock()
		if got, err := s.read(d.Hex); err == nil {
			if p != nil {
				p(Event{Phase: "cached", Ref: ref, Digest: d.String()})
			}
			return got, nil
		}
		return s.unpackImage(ctx, ref, d, img, p)
	})
	if err != nil {
		return nil, err
	}
	out := v.(*Image)
	if err := s.addRef(out, ref); err != nil {
		return nil, err
	}
	s.touch(out)
	if err := s.evict(out.Digest); err != nil {
		s.log.Warn("image cache eviction", "err", err)
	}
	if p != nil {
		p(Event{Phase: "done", Ref: ref, Digest: out.Digest})
	}
	return out, nil
}

func (s *Store) unpackImage(ctx context.Context, ref string, d v1.Hash, img v1.Image, p Progress) (*Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image %s: config: %w", ref, err)
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, fmt.Errorf("image %s: layers: %w", ref, err)
	}
	tmp, err := os.MkdirTemp(filepath.Join(s.opts.Dir, "tmp"), d.Hex[:12]+"-")
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", ref, err)
	}
	defer os.RemoveAll(tmp) // gone once renamed
	rootfs := filepath.Join(tmp, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return nil, err
	}
	u, err := newUnpacker(rootfs, s.opts.Limits)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", ref, err)
	}
	defer u.close()
	for i, l := range layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ld, err := l.Digest()
		if err != nil {
			return nil, fmt.Errorf("image %s: layer %d: %w", ref, i+1, err)
		}
		diffID, err := l.DiffID()
		if err != nil {
			return nil, fmt.Errorf("image %s: layer %d (%s): diff ID: %w", ref, i+1, ld, err)
		}
		size, _ := l.Size()
		rc, err := l.Compressed()
		if err != nil {
			return nil, fmt.Errorf("image %s: layer %d (%s): %w", ref, i+1, ld, err)
		}
		pr := &progressReader{r: rc, report: func(done int64) {
			if p != nil {
				p(Event{Phase: "layer", Ref: ref, Digest: d.String(), Layer: i + 1, Layers: len(layers), Done: done, Total: size})
			}
		}}
		err = u.layer(pr, ld, diffID)
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("image %s: layer %d (%s): %w", ref, i+1, ld, err)
		}
	}
	if err := u.finish(); err != nil {
		return nil, fmt.Errorf("image %s: %w", ref, err)
	}
	meta := &Image{Digest: d.String(), Refs: []string{ref}, Size: u.bytes, Layers: len(layers), Pulled: time.Now().UTC()}
	c := cf.Config
	meta.Config = Config{Env: c.Env, WorkingDir: c.WorkingDir, User: c.User, Entrypoint: c.Entrypoint, Cmd: c.Cmd}
	if err := writeMeta(filepath.Join(tmp, "image.json"), meta); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "used"), nil, 0o644); err != nil {
		return nil, err
	}
	final := s.dir(d.Hex)
	if err := os.Rename(tmp, final); err != nil {
		// Another process got there first: its root is the same.
		if got, rerr := s.read(d.Hex); rerr == nil {
			return got, nil
		}
		return nil, fmt.Errorf("image %s: put the root in place: %w", ref, err)
	}
	return s.read(d.Hex)
}

// lockDigest takes the exclusive lock of unpacking the image of digest
// hex, which other processes of the same cache honour too.
func (s *Store) lockDigest(hex string) (unlock func(), err error) {
	dir := filepath.Join(s.opts.Dir, "locks")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, hex), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock the image sha256:%s: %w", hex, err)
	}
	return func() { f.Close() }, nil
}

func (s *Store) dir(hex string) string { return filepath.Join(s.opts.Dir, "roots", hex) }

func writeMeta(path string, m *Image) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// read returns the cached image of digest hex hex.
func (s *Store) read(hex string) (*Image, error) {
	if !validHex(hex) {
		return nil, fmt.Errorf("image %s: %w", hex, sandbox.ErrNotFound)
	}
	dir := s.dir(hex)
	b, err := os.ReadFile(filepath.Join(dir, "image.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("image sha256:%s: %w", hex, sandbox.ErrNotFound)
	} else if err != nil {
		return nil, err
	}
	var m Image
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("image sha256:%s: %w", hex, err)
	}
	m.Root = filepath.Join(dir, "rootfs")
	if fi, err := os.Stat(filepath.Join(dir, "used")); err == nil {
		m.Used = fi.ModTime()
	}
	return &m, nil
}

func validHex(h string) bool {
	if len(h) != 64 {
		return false
	}
	for _, c := range h {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// List returns the cached images, most recently used first.
func (s *Store) List() ([]*Image, error) {
	ents, err := os.ReadDir(filepath.Join(s.opts.Dir, "roots"))
	if err != nil {
		return nil, err
	}
	var out []*Image
	for _, e := range ents {
		if img, err := s.read(e.Name()); err == nil {
			out = append(out, img)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Used.After(out[j].Used) })
	return out, nil
}

// lookup finds the cached image named ref: a reference it was pulled as,
// its digest ("sha256:…"), or a reference pinned to its digest.
func (s *Store) lookup(ref string) (*Image, error) {
	if i := strings.LastIndex(ref, "@sha256:"); i >= 0 {
		if img, err := s.read(ref[i+len("@sha256:"):]); err == nil {
			return img, nil
		}
	}
	if hex, ok := strings.CutPrefix(ref, "sha256:"); ok {
		return s.read(hex)
	}
	all, err := s.List()
	if err != nil {
		return nil, err
	}
	for _, img := range all {
		if slices.Contains(img.Refs, ref) {
			return img, nil
		}
	}
	return nil, fmt.Errorf("image %s: %w", ref, sandbox.ErrNotFound)
}

// addRef records ref as a name of img, and as no other image's: a tag
// names one image at a time.
func (s *Store) addRef(img *Image, ref string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	all, err := s.List()
	if err != nil {
		return err
	}
	for _, o := range all {
		has := slices.Contains(o.Refs, ref)
		switch {
		case o.Digest == img.Digest && !has:
			o.Refs = append(o.Refs, ref)
		case o.Digest != img.Digest && has:
			o.Refs = slices.DeleteFunc(o.Refs, func(r string) bool { return r == ref })
		default:
			continue
		}
		if err := writeMeta(filepath.Join(filepath.Dir(o.Root), "image.json"), o); err != nil {
			return err
		}
		if o.Digest == img.Digest {
			img.Refs = o.Refs
		}
	}
	return nil
}

func (s *Store) touch(img *Image) {
	now := time.Now()
	_ = os.Chtimes(filepath.Join(filepath.Dir(img.Root), "used"), now, now)
	img.Used = now
}

// ErrInUse is what removing an image a sandbox runs on fails with.
var ErrInUse = errors.New("in use by a running sandbox")

// Hold marks img as in use until release (or this process's end): neither
// Remove nor eviction removes it meanwhile, as a sandbox's root mount
// shows the very files they would delete. It is a shared lock on the
// image's "used" file, so it holds across processes.
func (s *Store) Hold(img *Image) (release func(), err error) {
	f, err := os.Open(filepath.Join(filepath.Dir(img.Root), "used"))
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", img.Digest, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		f.Close()
		return nil, fmt.Errorf("image %s: hold: %w", img.Digest, err)
	}
	return func() { f.Close() }, nil
}

// Remove removes the image named ref (a reference or digest) from the
// cache, unless a sandbox runs on it (ErrInUse).
func (s *Store) Remove(ref string) error {
	img, err := s.lookup(ref)
	if err != nil {
		if r, perr := s.reference(ref); perr == nil {
			img, err = s.lookup(r.Name())
		}
		if err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.removeDir(filepath.Dir(img.Root))
}

// removeDir moves a root out of roots/ first, so that no reader finds it
// half removed.
func (s *Store) removeDir(dir string) error {
	// Held (Hold) by a sandbox: not now. The lock stays taken until the
	// root is gone, so that no sandbox starts on it meanwhile.
	if used, err := os.Open(filepath.Join(dir, "used")); err == nil {
		defer used.Close()
		if err := syscall.Flock(int(used.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			return fmt.Errorf("remove image sha256:%s: %w", filepath.Base(dir), ErrInUse)
		}
	}
	tmp, err := os.MkdirTemp(filepath.Join(s.opts.Dir, "tmp"), "rm-")
	if err != nil {
		return err
	}
	gone := filepath.Join(tmp, "root")
	if err := os.Rename(dir, gone); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("remove image: %w", err)
	}
	return os.RemoveAll(tmp)
}

// evict removes the least recently used images, never keep, until the
// cache fits its cap.
func (s *Store) evict(keep string) error {
	cap := s.opts.MaxBytes
	if cap == 0 {
		cap = DefaultMaxBytes
	}
	if cap < 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	all, err := s.List()
	if err != nil {
		return err
	}
	var total int64
	for _, img := range all {
		total += img.Size
	}
	for i := len(all) - 1; i >= 0 && total > cap; i-- {
		img := all[i]
		if img.Digest == keep {
			continue
		}
		s.log.Info("image cache: evict", "digest", img.Digest, "refs", img.Refs, "size", img.Size)
		if err := s.removeDir(filepath.Dir(img.Root)); errors.Is(err, ErrInUse) {
			continue
		} else if err != nil {
			return err
		}
		total -= img.Size
	}
	return nil
}

// progressReader reports how much of a layer has been read, at most every
// 100 ms and at the end.
type progressReader struct {
	r      io.Reader
	n      int64
	sent   int64
	last   time.Time
	report func(done int64)
}

func (r *progressReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	r.n += int64(n)
	if now := time.Now(); r.n != r.sent && (err != nil || now.Sub(r.last) > 100*time.Millisecond) {
		r.last, r.sent = now, r.n
		r.report(r.n)
	}
	return n, err
}
