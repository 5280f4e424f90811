package supervisor

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"path"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/objstore"
)

// TestExportKeepsOthersObjects: one key's export never replaces an object
// another key exported, nor one exports did not make; a key replaces its
// own; the victim's download URL keeps serving the victim's content
// (security review 2, N5).
func TestExportKeepsOthersObjects(t *testing.T) {
	f := s3Fixture(t)
	ctx := context.Background()
	victim, err := f.sup.Create(ctx, bob, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	attacker, err := f.sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	theirs := []byte("name,count\nbob,1\n")
	mine := []byte("name,count\nalice,666\n")
	writeBytesAs(t, f.sup, bob, victim.ID, "/workspace/report.csv", theirs)
	writeBytes(t, f.sup, attacker.ID, "/workspace/report.csv", mine)
	writeBytes(t, f.sup, attacker.ID, "/workspace/tree/a.csv", mine)
	writeBytes(t, f.sup, attacker.ID, "/workspace/tree/report.csv", mine)
	res, err := f.sup.Export(ctx, bob, ExportRequest{Sandbox: victim.ID, Path: "/workspace/report.csv", To: "s3://agent-outputs/tenant-b/report.csv"})
	if err != nil {
		t.Fatal(err)
	}
	url := res.Objects[0].URL
	content := func() []byte {
		t.Helper()
		b, err := f.objects.GetBytes(ctx, "agent-outputs", "tenant-b/report.csv", 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// Another key: refused, whether a file or a tree that holds the name.
	_, err = f.sup.Export(ctx, alice, ExportRequest{Sandbox: attacker.ID, Path: "/workspace/report.csv", To: "s3://agent-outputs/tenant-b/report.csv"})
	if !errors.Is(err, ErrExportTaken) || !errors.Is(err, ErrForbidden) {
		t.Fatalf("another key's export onto it: %v", err)
	}
	_, err = f.sup.Export(ctx, alice, ExportRequest{Sandbox: attacker.ID, Path: "/workspace/tree", To: "s3://agent-outputs/tenant-b/"})
	if !errors.Is(err, ErrExportTaken) {
		t.Fatalf("another key's tree onto it: %v", err)
	}
	if got := f.objectsUnder(t, "tenant-b/"); len(got) != 1 {
		t.Fatalf("the refused tree left %v", got)
	}
	if !bytes.Equal(content(), theirs) {
		t.Fatalf("the object is now %q", content())
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(got, theirs) {
		t.Fatalf("the victim's URL serves %q", got)
	}
	// The owner replaces its own.
	writeBytesAs(t, f.sup, bob, victim.ID, "/workspace/report.csv", []byte("name,count\nbob,2\n"))
	if _, err := f.sup.Export(ctx, bob, ExportRequest{Sandbox: victim.ID, Path: "/workspace/report.csv", To: "s3://agent-outputs/tenant-b/report.csv"}); err != nil {
		t.Fatalf("the owner's export again: %v", err)
	}
	if string(content()) != "name,count\nbob,2\n" {
		t.Fatalf("after the owner's export: %q", content())
	}
	// An object exports did not make is nobody's to replace.
	if err := f.objects.PutBytes(ctx, "agent-outputs", "site/index.csv", []byte("a,b\n"), "text/csv", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.sup.Export(ctx, alice, ExportRequest{Sandbox: attacker.ID, Path: "/workspace/report.csv", To: "s3://agent-outputs/site/index.csv"}); !errors.Is(err, ErrExportTaken) {
		t.Fatalf("an export onto an object exports did not make: %v", err)
	}
	evs := f.exportEvents(t)
	if last := evs[len(evs)-1]; last.Decision != "deny" || !strings.Contains(last.Error, "this key did not export it") {
		t.Fatalf("the refusal's audit event: %+v", last)
	}
}

// TestObjectStoreConditions: the S3 server honours the conditions exports
// rely on (If-None-Match: *, If-Match), in one request and in a multipart
// upload.
func TestObjectStoreConditions(t *testing.T) {
	f := s3Fixture(t)
	ctx := context.Background()
	o := f.objects
	put := func(u objstore.Upload, size int) error {
		u.Bucket = "agent-outputs"
		_, err := o.Put(ctx, u, bytes.NewReader(bytes.Repeat([]byte("x"), size)), nil)
		return err
	}
	for _, size := range []int{10, objstore.PartSize + 10} {
		key := "cond/" + strings.Repeat("m", size/objstore.PartSize+1)
		if err := put(objstore.Upload{Key: key, IfAbsent: true}, size); err != nil {
			t.Fatalf("%d bytes where there is none: %v", size, err)
		}
		if err := put(objstore.Upload{Key: key, IfAbsent: true}, size); !errors.Is(err, objstore.ErrChanged) {
			t.Fatalf("%d bytes, if absent, over one: %v", size, err)
		}
		info, ok, err := o.Stat(ctx, "agent-outputs", key)
		if err != nil || !ok || info.ETag == "" {
			t.Fatalf("stat: %+v %v %v", info, ok, err)
		}
		if err := put(objstore.Upload{Key: key, IfMatch: `"0123"`}, size); !errors.Is(err, objstore.ErrChanged) {
			t.Fatalf("%d bytes over another ETag: %v", size, err)
		}
		if err := put(objstore.Upload{Key: key, IfMatch: info.ETag}, size); err != nil {
			t.Fatalf("%d bytes over its ETag: %v", size, err)
		}
	}
}

// TestExportDestinations: a key with a leading empty element is refused
// (it was stored as "/x"), and so is a destination in the snapshot store
// or outside the places [export] buckets names (security review 2, N7).
func TestExportDestinations(t *testing.T) {
	for _, to := range []string{"s3://shared//x", "s3://shared/a//x", "s3://shared/./x", "s3://shared/a/../x", "s3://shared/a\x00"} {
		if _, _, err := parseS3(to); err == nil {
			t.Errorf("%q was taken", to)
		}
	}
	for _, to := range []string{"s3://shared/", "s3://shared/a/", "s3://shared/a/x.csv", "s3://shared"} {
		if _, _, err := parseS3(to); err != nil {
			t.Errorf("%q: %v", to, err)
		}
	}
	s := &Supervisor{cfg: Config{
		Snapshots: SnapshotsConfig{Store: SnapshotsS3, Bucket: "shared", Prefix: "snap/"},
		Export:    ExportConfig{Buckets: []string{"shared", "other/out"}},
	}}
	for _, tc := range []struct {
		bucket, key string
		ok          bool
	}{
		{"shared", "snap/snapshots/sn-forged.json", false},
		{"shared", "snap/blobs/k/ab/cdef", false},
		{"shared", "tenant/report.csv", true},
		{"other", "out/report.csv", true},
		{"other", "outside.csv", false},
		{"third", "x.csv", false},
	} {
		err := s.exportPlaceOf(tc.bucket, tc.key)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrForbidden)) {
			t.Errorf("s3://%s/%s: %v, want ok %v", tc.bucket, tc.key, err, tc.ok)
		}
	}
	for _, tc := range []struct {
		text string
		ok   bool
	}{
		{"[snapshots]\nstore = \"s3\"\nbucket = \"shared\"\nprefix = \"snap/\"\n[export]\nbuckets = [\"shared\"]\n", false},
		{"[snapshots]\nstore = \"s3\"\nbucket = \"shared\"\nprefix = \"snap/\"\n[export]\nbuckets = [\"shared/snap/out/\"]\n", false},
		{"[snapshots]\nstore = \"s3\"\nbucket = \"shared\"\n[export]\nbuckets = [\"shared/exports/\"]\n", false},
		{"[snapshots]\nstore = \"s3\"\nbucket = \"shared\"\nprefix = \"snap/\"\n[export]\nbuckets = [\"shared/exports/\"]\n", true},
		{"[snapshots]\nstore = \"s3\"\nbucket = \"shared\"\nprefix = \"snap/\"\n[export]\nbuckets = [\"outputs\", \"shared/exports\"]\n", true},
		{"[export]\nbuckets = [\"shared//x/\"]\n", false},
	} {
		_, err := parseConfig("c.toml", tc.text)
		var ce *ConfigError
		if tc.ok != (err == nil) || (err != nil && (!errors.As(err, &ce) || unindexed(ce.Key) != "export.buckets")) {
			t.Errorf("%q: %v, want ok %v", tc.text, err, tc.ok)
		}
	}
}

// writeBytesAs is writeBytes as caller c.
func writeBytesAs(t *testing.T, sup *Supervisor, c Caller, id, p string, b []byte) {
	t.Helper()
	files, done, err := sup.Files(context.Background(), c, id)
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
