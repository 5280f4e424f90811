package supervisor

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/objstore"
	"github.com/airlock-sandbox/airlock/internal/s3server"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
	"github.com/airlock-sandbox/airlock/internal/snapshot/s3store"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/testcap"
	"github.com/airlock-sandbox/airlock/internal/testrig"
)

// Files whose bytes say what they are.
var (
	pngBytes = append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"), make([]byte, 64)...)
	pdfBytes = []byte("%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n")
	elfBytes = append([]byte("\x7fELF\x02\x01\x01\x00"), make([]byte, 120)...)
	csvBytes = []byte("name,count\nalpha,1\nbeta,2\n")
)

// objFixture is a supervisor whose exports and snapshots go to a real S3
// server (versitygw).
type objFixture struct {
	sup     *Supervisor
	srv     *s3server.Server
	objects *objstore.Client
	audit   *audit.Log
}

func objClient(t *testing.T, srv *s3server.Server, secret string) *objstore.Client {
	t.Helper()
	c, err := objstore.New(objstore.Config{Endpoint: srv.Endpoint, Region: srv.Region, AccessKeyID: srv.AccessKey, SecretAccessKey: objstore.Secret(secret)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newObjFixture(t *testing.T, srv *s3server.Server, objects *objstore.Client, snaps snapshot.Store) *objFixture {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	al, err := audit.Open(filepath.Join(dir, "audit.log"), audit.Options{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	mem := &atomic.Int64{}
	mem.Store(64 << 30)
	cfg := Config{
		Templates: []Template{
			{Name: "default", ExportTypes: []string{"text/csv", "image/*", "application/pdf"}, ExportMax: 64 << 10},
			{Name: "csv", ExportTypes: []string{"text/csv"}},
			{Name: "none"},
		},
		Export: ExportConfig{Buckets: []string{"agent-outputs"}, Presign: Duration(15 * time.Minute)},
	}
	sup, err := New(Options{
		Store: st, Drivers: map[string]sandbox.Driver{"native": &fake.Driver{}}, Config: cfg, Audit: al,
		Snapshots: snaps, Objects: objects,
		MemAvailable: func() (int64, error) { return mem.Load(), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sup.Close(context.Background())
		_ = al.Close()
		st.Close()
	})
	return &objFixture{sup: sup, srv: srv, objects: objects, audit: al}
}

func s3Fixture(t *testing.T) *objFixture {
	t.Helper()
	testcap.Require(t, "s3")
	srv := testrig.StartS3(t)
	for _, b := range []string{"agent-outputs", "elsewhere"} {
		if err := srv.MakeBucket(b); err != nil {
			t.Fatal(err)
		}
	}
	return newObjFixture(t, srv, objClient(t, srv, srv.SecretKey), nil)
}

func writeBytes(t *testing.T, sup *Supervisor, id, p string, b []byte) {
	t.Helper()
	files, done, err := sup.Files(context.Background(), alice, id)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	if err := files.Mkdir(context.Background(), path.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := files.WriteFile(context.Background(), p, bytes.NewReader(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

// objects lists the keys under prefix in the bucket.
func (f *objFixture) objectsUnder(t *testing.T, prefix string) []string {
	t.Helper()
	var keys []string
	err := f.objects.List(context.Background(), "agent-outputs", prefix, func(o objstore.Object) error {
		keys = append(keys, o.Key)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func (f *objFixture) exportEvents(t *testing.T) []audit.Event {
	t.Helper()
	lines, err := f.audit.Recent(100)
	if err != nil {
		t.Fatal(err)
	}
	var out []audit.Event
	for _, l := range lines {
		var ev audit.Event
		if err := json.Unmarshal(l, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Kind == audit.KindExport {
			out = append(out, ev)
		}
	}
	return out
}

func hexSHA(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// TestExportFile: a CSV and a PDF are stored with the type their bytes
// say, metadata naming the sandbox, the exec and the path, a download
// URL that works, and an audit event with the digest.
func TestExportFile(t *testing.T) {
	f := s3Fixture(t)
	ctx := context.Background()
	in, err := f.sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	writeBytes(t, f.sup, in.ID, "/workspace/out/report.txt", csvBytes) // the name says text; the bytes say CSV
	writeBytes(t, f.sup, in.ID, "/workspace/paper", pdfBytes)
	res, err := f.sup.Export(ctx, alice, ExportRequest{Sandbox: in.ID, Path: "/workspace/out/report.txt", To: "s3://agent-outputs/sess-1/", Exec: "ex-42"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Objects) != 1 || res.Bytes != int64(len(csvBytes)) {
		t.Fatalf("export = %+v", res)
	}
	o := res.Objects[0]
	if o.Object != "s3://agent-outputs/sess-1/report.txt" || o.ContentType != "text/csv; charset=utf-8" || o.SHA256 != hexSHA(csvBytes) || o.URL == "" {
		t.Fatalf("object = %+v", o)
	}
	head, err := f.objects.S3().HeadObject(ctx, &s3.HeadObjectInput{Bucket: ptr("agent-outputs"), Key: ptr("sess-1/report.txt")})
	if err != nil {
		t.Fatal(err)
	}
	if head.Metadata["airlock-sandbox"] != in.ID || head.Metadata["airlock-exec"] != "ex-42" || head.Metadata["airlock-path"] != "/workspace/out/report.txt" || !strings.HasPrefix(*head.ContentType, "text/csv") {
		t.Fatalf("metadata %v, content type %s", head.Metadata, *head.ContentType)
	}
	resp, err := http.Get(o.URL)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(got, csvBytes) {
		t.Fatalf("the presigned URL gives %d %q", resp.StatusCode, got)
	}
	// A key that names the object.
	res, err = f.sup.Export(ctx, alice, ExportRequest{Sandbox: in.ID, Path: "/workspace/paper", To: "s3://agent-outputs/sess-1/paper.pdf"})
	if err != nil || res.Objects[0].ContentType != "application/pdf" || res.Objects[0].Object != "s3://agent-outputs/sess-1/paper.pdf" {
		t.Fatalf("export of a PDF = %+v, %v", res, err)
	}
	evs := f.exportEvents(t)
	if len(evs) != 2 || evs[0].Decision != "allow" || evs[0].SHA256 != hexSHA(csvBytes) || evs[0].Object != o.Object || evs[0].Exec != "ex-42" || evs[0].Sandbox != in.ID || evs[0].Key != alice.KeyID {
		t.Fatalf("audit events %+v", evs)
	}
}

// TestExportRefusesByBytes: a PNG named .csv where only CSV is allowed,
// and a program named .png where images are, are refused by what their
// bytes are; nothing is stored and the refusal is audited. A template
// with no export_types, a bucket the config does not list, and a relative
// path are refused too.
func TestExportRefusesByBytes(t *testing.T) {
	f := s3Fixture(t)
	ctx := context.Background()
	csvOnly, err := f.sup.Create(ctx, alice, CreateRequest{Template: "csv"})
	if err != nil {
		t.Fatal(err)
	}
	writeBytes(t, f.sup, csvOnly.ID, "/workspace/data.csv", pngBytes)
	_, err = f.sup.Export(ctx, alice, ExportRequest{Sandbox: csvOnly.ID, Path: "/workspace/data.csv", To: "s3://agent-outputs/x/"})
	if !errors.Is(err, ErrTypeRefused) || !strings.Contains(err.Error(), "image/png") || !strings.Contains(err.Error(), "text/csv") {
		t.Fatalf("a PNG named .csv: %v, want refused naming image/png and text/csv", err)
	}
	in, err := f.sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	writeBytes(t, f.sup, in.ID, "/workspace/pic.png", elfBytes)
	_, err = f.sup.Export(ctx, alice, ExportRequest{Sandbox: in.ID, Path: "/workspace/pic.png", To: "s3://agent-outputs/x/"})
	if !errors.Is(err, ErrTypeRefused) || !strings.Contains(err.Error(), "application/x-executable") {
		t.Fatalf("a program named .png: %v", err)
	}
	if keys := f.objectsUnder(t, "x/"); len(keys) != 0 {
		t.Fatalf("refused exports stored %v", keys)
	}
	evs := f.exportEvents(t)
	if len(evs) != 2 || evs[0].Decision != "deny" || evs[0].ContentType != "image/png" || evs[1].Decision != "deny" || evs[1].Error == "" {
		t.Fatalf("audit events %+v", evs)
	}
	none, err := f.sup.Create(ctx, alice, CreateRequest{Template: "none"})
	if err != nil {
		t.Fatal(err)
	}
	writeBytes(t, f.sup, none.ID, "/workspace/a.csv", csvBytes)
	if _, err := f.sup.Export(ctx, alice, ExportRequest{Sandbox: none.ID, Path: "/workspace/a.csv", To: "s3://agent-outputs/x/"}); !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), "export_types") {
		t.Fatalf("a template without export_types: %v", err)
	}
	writeBytes(t, f.sup, in.ID, "/workspace/a.csv", csvBytes)
	if _, err := f.sup.Export(ctx, alice, ExportRequest{Sandbox: in.ID, Path: "/workspace/a.csv", To: "s3://elsewhere/x/"}); !errors.Is(err, ErrForbidden) {
		t.Fatalf("a bucket the config does not list: %v", err)
	}
	for _, bad := range []ExportRequest{
		{Sandbox: in.ID, Path: "a.csv", To: "s3://agent-outputs/x/"},
		{Sandbox: in.ID, Path: "/workspace/a.csv", To: "https://agent-outputs/x/"},
		{Sandbox: in.ID, Path: "/workspace/a.csv", To: "s3://agent-outputs/x/../y"},
		{Sandbox: in.ID, Path: "/workspace/a.csv", To: "s3://agent-outputs/x/", Exec: "../e"},
	} {
		if _, err := f.sup.Export(ctx, alice, bad); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("export %+v: %v, want invalid", bad, err)
		}
	}
	if keys := f.objectsUnder(t, ""); len(keys) != 0 {
		t.Fatalf("refused exports stored %v", keys)
	}
}

// TestExportTree: every regular file of a directory is stored under the
// prefix at its path below it (a symlink is skipped and named); a tree
// holding one refused file stores nothing.
func TestExportTree(t *testing.T) {
	f := s3Fixture(t)
	ctx := context.Background()
	in, err := f.sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	writeBytes(t, f.sup, in.ID, "/workspace/out/a.csv", csvBytes)
	writeBytes(t, f.sup, in.ID, "/workspace/out/img/b.png", pngBytes)
	writeBytes(t, f.sup, in.ID, "/workspace/out/img/deep/c.pdf", pdfBytes)
	files, done, err := f.sup.Files(ctx, alice, in.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := files.Symlink(ctx, "/etc/passwd", "/workspace/out/link"); err != nil {
		t.Fatal(err)
	}
	done()
	res, err := f.sup.Export(ctx, alice, ExportRequest{Sandbox: in.ID, Path: "/workspace/out/", To: "s3://agent-outputs/run-7"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"run-7/a.csv", "run-7/img/b.png", "run-7/img/deep/c.pdf"}
	if keys := f.objectsUnder(t, "run-7/"); strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Fatalf("stored %v, want %v", keys, want)
	}
	if len(res.Objects) != 3 || res.Objects[1].ContentType != "image/png" || res.Bytes != int64(len(csvBytes)+len(pngBytes)+len(pdfBytes)) || len(res.Skipped) != 1 || res.Skipped[0] != "/workspace/out/link" {
		t.Fatalf("export = %+v", res)
	}
	for _, o := range res.Objects {
		b, err := f.objects.GetBytes(ctx, "agent-outputs", strings.TrimPrefix(o.Object, "s3://agent-outputs/"), 1<<20)
		if err != nil || hexSHA(b) != o.SHA256 || int64(len(b)) != o.Size {
			t.Fatalf("%s reads back %d bytes, %v", o.Object, len(b), err)
		}
	}
	// One program in the tree: nothing of the tree is stored.
	writeBytes(t, f.sup, in.ID, "/workspace/out/img/zz.png", elfBytes)
	if _, err := f.sup.Export(ctx, alice, ExportRequest{Sandbox: in.ID, Path: "/workspace/out", To: "s3://agent-outputs/run-8/"}); !errors.Is(err, ErrTypeRefused) {
		t.Fatalf("a tree with a program in it: %v", err)
	}
	if keys := f.objectsUnder(t, "run-8/"); len(keys) != 0 {
		t.Fatalf("a refused tree stored %v", keys)
	}
}

// TestExportOverCap: a file over the template's export_max is refused
// before anything is stored.
func TestExportOverCap(t *testing.T) {
	f := s3Fixture(t)
	ctx := context.Background()
	in, err := f.sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	big := append([]byte(nil), pngBytes...)
	big = append(big, make([]byte, 64<<10)...)
	writeBytes(t, f.sup, in.ID, "/workspace/big.png", big)
	_, err = f.sup.Export(ctx, alice, ExportRequest{Sandbox: in.ID, Path: "/workspace/big.png", To: "s3://agent-outputs/cap/"})
	if !errors.Is(err, objstore.ErrTooLarge) || !strings.Contains(err.Error(), "export_max") {
		t.Fatalf("a file over the cap: %v", err)
	}
	if keys := f.objectsUnder(t, "cap/"); len(keys) != 0 {
		t.Fatalf("stored %v", keys)
	}
}

// TestExportStoreDownOrRefusing: a store that is down, or that refuses
// the daemon's credentials, fails the export with an error that says so
// and what to check; nothing is reported stored, and nothing is.
func TestExportStoreDownOrRefusing(t *testing.T) {
	testcap.Require(t, "s3")
	srv := testrig.StartS3(t)
	if err := srv.MakeBucket("agent-outputs"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	bad := newObjFixture(t, srv, objClient(t, srv, "wrong-secret"), nil)
	in, err := bad.sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	writeBytes(t, bad.sup, in.ID, "/workspace/a.csv", csvBytes)
	res, err := bad.sup.Export(ctx, alice, ExportRequest{Sandbox: in.ID, Path: "/workspace/a.csv", To: "s3://agent-outputs/d/"})
	if !errors.Is(err, objstore.ErrDenied) || !strings.Contains(err.Error(), "secret_access_key") || len(res.Objects) != 0 {
		t.Fatalf("wrong credentials: %+v, %v", res, err)
	}

	f := newObjFixture(t, srv, objClient(t, srv, srv.SecretKey), nil)
	in, err = f.sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	writeBytes(t, f.sup, in.ID, "/workspace/t/a.csv", csvBytes)
	writeBytes(t, f.sup, in.ID, "/workspace/t/b.pdf", pdfBytes)
	srv.Stop()
	res, err = f.sup.Export(ctx, alice, ExportRequest{Sandbox: in.ID, Path: "/workspace/t", To: "s3://agent-outputs/d/"})
	if !errors.Is(err, objstore.ErrUnavailable) || !strings.Contains(err.Error(), srv.Endpoint) || len(res.Objects) != 0 {
		t.Fatalf("store down: %+v, %v", res, err)
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if keys := f.objectsUnder(t, "d/"); len(keys) != 0 {
		t.Fatalf("a failed export left %v", keys)
	}
	if evs := f.exportEvents(t); len(evs) != 1 || evs[0].Decision != "deny" || !strings.Contains(evs[0].Error, "unavailable") {
		t.Fatalf("audit events %+v", evs)
	}
	// And once it is back, the same export works.
	if res, err := f.sup.Export(ctx, alice, ExportRequest{Sandbox: in.ID, Path: "/workspace/t", To: "s3://agent-outputs/d/"}); err != nil || len(res.Objects) != 2 {
		t.Fatalf("export after the restart: %+v, %v", res, err)
	}
}

// TestForkFromObjectStore: a snapshot one daemon keeps in the bucket forks
// on another daemon that names the same bucket and prefix.
func TestForkFromObjectStore(t *testing.T) {
	testcap.Require(t, "s3")
	srv := testrig.StartS3(t)
	if err := srv.MakeBucket("snaps"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	open := func() snapshot.Store {
		st, err := s3store.Open(ctx, objClient(t, srv, srv.SecretKey), "snaps", "fleet")
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	a := newObjFixture(t, srv, nil, open())
	b := newObjFixture(t, srv, nil, open())
	in, err := a.sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	writeBytes(t, a.sup, in.ID, "/workspace/notes.txt", []byte("made on host a\n"))
	writeBytes(t, a.sup, in.ID, "/workspace/data/x.bin", pngBytes)
	sn, err := a.sup.Snapshot(ctx, alice, in.ID, SnapshotRequest{Name: "done"})
	if err != nil {
		t.Fatal(err)
	}
	fk, err := b.sup.Fork(ctx, alice, ForkRequest{Snapshot: sn.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := read(t, b.sup, alice, fk.Sandbox.ID, "/workspace/notes.txt"); err != nil || got != "made on host a\n" {
		t.Fatalf("the fork on host b reads %q, %v", got, err)
	}
	if got, err := read(t, b.sup, alice, fk.Sandbox.ID, "/workspace/data/x.bin"); err != nil || got != string(pngBytes) {
		t.Fatalf("the fork on host b reads %d bytes, %v", len(got), err)
	}
	// Another key cannot fork it.
	if _, err := b.sup.Fork(ctx, Caller{KeyID: "key-bob"}, ForkRequest{Snapshot: sn.ID}); !errors.Is(err, ErrForbidden) {
		t.Fatalf("another key's fork: %v", err)
	}
}

func ptr(s string) *string { return &s }

// TestObjectConfig: the object store's keys load, and a mistake in them
// names its key.
func TestObjectConfig(t *testing.T) {
	good := `
[object_store]
endpoint = "http://127.0.0.1:9000"
access_key_id = "AK"
secret_access_key = "SK"
[snapshots]
store = "s3"
bucket = "airlock-snaps"
prefix = "prod/"
[export]
buckets = ["agent-outputs"]
presign = "15m"
[[template]]
name = "default"
export_types = ["text/csv", "image/*"]
`
	c, err := parseConfig("c.toml", good)
	if err != nil {
		t.Fatal(err)
	}
	if c.ObjectStore.SecretAccessKey != "SK" || c.Snapshots.Bucket != "airlock-snaps" || c.Templates[0].ExportMax != DefaultExportMax || !c.UsesObjects() {
		t.Fatalf("config %+v", c)
	}
	if s := fmt.Sprintf("%v", c.ObjectStore); strings.Contains(s, "SK") {
		t.Fatalf("the secret prints: %s", s)
	}
	for _, bad := range []struct{ text, key string }{
		{"[snapshots]\nstore = \"nfs\"\n", "snapshots.store"},
		{"[snapshots]\nstore = \"s3\"\nbucket = \"Bad_Bucket\"\n", "snapshots.bucket"},
		{"[export]\nbuckets = [\"x\"]\n", "export.buckets"},
		{"[export]\npresign = \"30d\"\n", "export.presign"},
		{"[object_store]\naccess_key_id = \"AK\"\n", "object_store.access_key_id"},
		{"[[template]]\nname = \"t\"\nexport_types = [\"*/*\"]\n", "template.export_types"},
		{"[[template]]\nname = \"t\"\nexport_types = [\"text/csv; charset=utf-8\"]\n", "template.export_types"},
	} {
		_, err := parseConfig("c.toml", bad.text)
		var ce *ConfigError
		if !errors.As(err, &ce) || unindexed(ce.Key) != bad.key {
			t.Errorf("%q: %v, want an error at %s", bad.text, err, bad.key)
		}
	}
}
