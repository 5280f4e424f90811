package s3store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/objstore"
	"github.com/airlock-sandbox/airlock/internal/s3server"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
	"github.com/airlock-sandbox/airlock/internal/testcap"
	"github.com/airlock-sandbox/airlock/internal/testrig"
)

func digest(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

// server starts versitygw with a bucket "snaps".
func server(t *testing.T) *s3server.Server {
	t.Helper()
	testcap.Require(t, "s3")
	srv := testrig.StartS3(t)
	if err := srv.MakeBucket("snaps"); err != nil {
		t.Fatal(err)
	}
	return srv
}

func client(t *testing.T, srv *s3server.Server, secret string) *objstore.Client {
	t.Helper()
	c, err := objstore.New(objstore.Config{Endpoint: srv.Endpoint, Region: srv.Region, AccessKeyID: srv.AccessKey, SecretAccessKey: objstore.Secret(secret)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func open(t *testing.T, srv *s3server.Server, prefix string) *Store {
	t.Helper()
	st, err := Open(context.Background(), client(t, srv, srv.SecretKey), "snaps", prefix)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func snap(owner string, entries ...sandbox.TreeEntry) *snapshot.Snapshot {
	s := &snapshot.Snapshot{
		Info:    snapshot.Info{ID: snapshot.NewID(), Owner: owner, Sandbox: "sb-1", Kind: snapshot.KindManual, Created: time.Now(), Roots: []string{sandbox.Workspace}},
		Entries: append([]sandbox.TreeEntry{{Path: "/workspace", Type: sandbox.EntryDir, Mode: 0o755}}, entries...),
	}
	s.Summarize()
	return s
}

func file(p string, content []byte) sandbox.TreeEntry {
	return sandbox.TreeEntry{Path: p, Type: sandbox.EntryFile, Mode: 0o644, Size: int64(len(content)), Digest: digest(content)}
}

func putBlob(t *testing.T, st *Store, ns string, b []byte) {
	t.Helper()
	d, n, err := st.PutBlob(context.Background(), ns, bytes.NewReader(b))
	if err != nil || d != digest(b) || n != int64(len(b)) {
		t.Fatalf("PutBlob(%d bytes) = %s, %d, %v; want %s", len(b), d, n, err, digest(b))
	}
}

func readBlob(t *testing.T, st *Store, ns, d string) []byte {
	t.Helper()
	rc, err := st.OpenBlob(context.Background(), ns, d)
	if err != nil {
		t.Fatalf("OpenBlob(%s): %v", d, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// big is content over one part, so that it is uploaded in parts.
func big() []byte {
	b := make([]byte, objstore.PartSize*2+12345)
	for i := range b {
		b[i] = byte(i*7 + i/4096)
	}
	return b
}

// TestRoundTripAndShare: content and snapshots stored by one store (one
// daemon) are read back whole, counted once per key, and seen by a second
// store on the same bucket and prefix (another daemon), which reads the
// snapshot and its content; another key's namespace sees none of it.
func TestRoundTripAndShare(t *testing.T) {
	ctx := context.Background()
	srv := server(t)
	a := open(t, srv, "team/a")
	small, large := []byte("hello, bucket\n"), big()
	putBlob(t, a, "k1", small)
	putBlob(t, a, "k1", large)
	putBlob(t, a, "k1", small) // again: stored once
	s1 := snap("k1", file("/workspace/big.bin", large), file("/workspace/x.txt", small))
	if err := a.Put(ctx, s1); err != nil {
		t.Fatal(err)
	}
	if err := a.Put(ctx, s1); !errors.Is(err, sandbox.ErrExists) {
		t.Fatalf("a second Put of %s: %v, want ErrExists", s1.ID, err)
	}
	u, err := a.Usage(ctx, "k1")
	if err != nil || u.Snapshots != 1 || u.Bytes != int64(len(small)+len(large)) {
		t.Fatalf("usage %+v, %v; want 1 snapshot of %d bytes", u, err, len(small)+len(large))
	}

	b := open(t, srv, "/team/a/") // the same prefix, written otherwise
	got, err := b.Get(ctx, s1.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != s1.ID || got.Owner != "k1" || len(got.Entries) != 3 || got.Entries[1].Digest != digest(large) {
		t.Fatalf("the second store reads %+v", got)
	}
	list, err := b.List(ctx, "k1")
	if err != nil || len(list) != 1 || list[0].ID != s1.ID || list[0].Files != 2 {
		t.Fatalf("List(k1) on the second store = %+v, %v", list, err)
	}
	if all, err := b.List(ctx, ""); err != nil || len(all) != 1 {
		t.Fatalf("List(all) = %+v, %v", all, err)
	}
	if !bytes.Equal(readBlob(t, b, "k1", digest(large)), large) || !bytes.Equal(readBlob(t, b, "k1", digest(small)), small) {
		t.Fatal("content read through the second store differs")
	}
	// Another key's namespace holds none of it.
	if ok, err := b.HasBlob(ctx, "k2", digest(small)); ok || err != nil {
		t.Fatalf("key k2 sees key k1's content (%v, %v)", ok, err)
	}
	if err := b.Put(ctx, snap("k2", file("/workspace/x", small))); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("a snapshot of content its key never stored: %v", err)
	}
	if _, err := b.OpenBlob(ctx, "k2", digest(small)); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("OpenBlob of another key's content: %v", err)
	}
	if l, err := b.List(ctx, "k2"); err != nil || len(l) != 0 {
		t.Fatalf("List(k2) = %+v, %v", l, err)
	}
	// Another prefix is another store.
	if l, err := open(t, srv, "team/b").List(ctx, ""); err != nil || len(l) != 0 {
		t.Fatalf("another prefix lists %+v, %v", l, err)
	}
	if _, err := b.Get(ctx, snapshot.NewID()); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Get of no snapshot: %v", err)
	}
}

// TestDeleteKeepsSharedContent: deleting a snapshot removes it everywhere
// and the content no other snapshot holds (once it is older than the
// grace), and keeps what another snapshot holds.
func TestDeleteKeepsSharedContent(t *testing.T) {
	ctx := context.Background()
	srv := server(t)
	a := open(t, srv, "")
	putBlob(t, a, "k1", []byte("shared"))
	putBlob(t, a, "k1", []byte("only one"))
	s1 := snap("k1", file("/workspace/a", []byte("shared")), file("/workspace/b", []byte("only one")))
	s2 := snap("k1", file("/workspace/a", []byte("shared")))
	for _, s := range []*snapshot.Snapshot{s1, s2} {
		if err := a.Put(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	b := open(t, srv, "")
	if _, err := b.Get(ctx, s1.ID); err != nil {
		t.Fatal(err)
	}
	old := blobGrace
	blobGrace = 0
	t.Cleanup(func() { blobGrace = old })
	if err := a.Delete(ctx, s1.ID); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete(ctx, s1.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("a second delete: %v", err)
	}
	if l, err := b.List(ctx, "k1"); err != nil || len(l) != 1 || l[0].ID != s2.ID {
		t.Fatalf("after the delete the other store lists %+v, %v", l, err)
	}
	if _, err := b.OpenBlob(ctx, "k1", digest([]byte("only one"))); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("the deleted snapshot's own content: %v, want gone", err)
	}
	if got := readBlob(t, b, "k1", digest([]byte("shared"))); string(got) != "shared" {
		t.Fatalf("shared content: %q", got)
	}
	if u, err := b.Usage(ctx, "k1"); err != nil || u.Snapshots != 1 || u.Bytes != int64(len("shared")) {
		t.Fatalf("usage %+v, %v", u, err)
	}
}

// TestWrongCredentials: a store opened with a secret the server does not
// know is refused, with an error that names the credentials to check; the
// environment's credentials work; a missing bucket says to create it.
func TestWrongCredentials(t *testing.T) {
	srv := server(t)
	_, err := Open(context.Background(), client(t, srv, "not-the-secret"), "snaps", "")
	if !errors.Is(err, objstore.ErrDenied) || !strings.Contains(err.Error(), "AWS_SECRET_ACCESS_KEY") {
		t.Fatalf("Open with a wrong secret: %v, want ErrDenied saying what to check", err)
	}
	// Credentials from the daemon's environment, when the config has none.
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	envClient, err := objstore.New(objstore.Config{Endpoint: srv.Endpoint, Region: srv.Region})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(context.Background(), envClient, "snaps", ""); err != nil {
		t.Fatalf("Open with the environment's credentials: %v", err)
	}
	_, err = Open(context.Background(), client(t, srv, srv.SecretKey), "no-such-bucket", "")
	if !errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(err.Error(), "create it") {
		t.Fatalf("Open of a missing bucket: %v", err)
	}
}

// stopAfter is a reader that stops the server once n bytes were read, in
// the middle of an upload in parts.
type stopAfter struct {
	r    io.Reader
	n    int
	stop func()
}

func (s *stopAfter) Read(p []byte) (int, error) {
	if s.n <= 0 && s.stop != nil {
		s.stop()
		s.stop = nil
	}
	if len(p) > s.n && s.n > 0 {
		p = p[:s.n]
	}
	k, err := s.r.Read(p)
	s.n -= k
	return k, err
}

// TestServerDown: with the server gone every operation fails with an error
// that says the store is unavailable and where; content cut off in the
// middle of its upload and a snapshot whose record failed are not in the
// store once it is back.
func TestServerDown(t *testing.T) {
	ctx := context.Background()
	srv := server(t)
	st := open(t, srv, "p")
	large := big()
	_, _, err := st.PutBlob(ctx, "k1", &stopAfter{r: bytes.NewReader(large), n: objstore.PartSize + 100, stop: srv.Stop})
	if !errors.Is(err, objstore.ErrUnavailable) || !strings.Contains(err.Error(), srv.Endpoint) {
		t.Fatalf("PutBlob while the server goes: %v, want ErrUnavailable naming %s", err, srv.Endpoint)
	}
	if _, _, err := st.PutBlob(ctx, "k1", strings.NewReader("small")); !errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("PutBlob with the server down: %v", err)
	}
	s1 := snap("k1", file("/workspace/a", []byte("small")))
	if err := st.Put(ctx, s1); !errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("Put with the server down: %v", err)
	}
	if _, err := st.List(ctx, "k1"); !errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("List with the server down: %v", err)
	}
	if _, err := Open(ctx, client(t, srv, srv.SecretKey), "snaps", "p"); !errors.Is(err, objstore.ErrUnavailable) || !strings.Contains(err.Error(), "check that it runs") {
		t.Fatalf("Open with the server down: %v", err)
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{digest(large), digest([]byte("small"))} {
		if ok, err := st.HasBlob(ctx, "k1", d); ok || err != nil {
			t.Fatalf("content %s whose upload failed is in the store (%v, %v)", d, ok, err)
		}
	}
	if l, err := st.List(ctx, ""); err != nil || len(l) != 0 {
		t.Fatalf("a snapshot whose record failed is listed: %+v, %v", l, err)
	}
	if _, err := st.Get(ctx, s1.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Get of the failed snapshot: %v", err)
	}
	// And the store works again.
	putBlob(t, st, "k1", []byte("small"))
	if err := st.Put(ctx, s1); err != nil {
		t.Fatal(err)
	}
}
