package supervisor

import (
	"fmt"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/objstore"
)

// SnapshotsConfig says where snapshots are kept:
//
//	[snapshots]
//	store = "local"          # STATE/snapshots; or "s3": the bucket below
//	bucket = "airlock-snapshots"   # in [object_store]
//	prefix = "prod/"         # keys start with it; daemons on one bucket and prefix share snapshots
type SnapshotsConfig struct {
	Store  string `toml:"store"`
	Bucket string `toml:"bucket"`
	Prefix string `toml:"prefix"`
}

// Where snapshots can be kept.
const (
	SnapshotsLocal = "local"
	SnapshotsS3    = "s3"
)

// ExportConfig says where a sandbox's files may be exported:
//
//	[export]
//	buckets = ["agent-outputs", "shared/exports/"]   # the buckets of [object_store] exports may write to, each whole or only under a prefix (BUCKET/PREFIX/); none: no export
//	presign = "15m"               # each exported object's download URL lasts this long; 0: none
//
// No place of exports may overlap the snapshot store's bucket and prefix
// (an export there could forge a snapshot or plant a blob).
type ExportConfig struct {
	Buckets []string `toml:"buckets"`
	Presign Duration `toml:"presign"`
}

// exportPlace is one entry of [export] buckets: a bucket, and the prefix
// every key there must start with ("" for the whole bucket).
type exportPlace struct{ bucket, prefix string }

func (p exportPlace) String() string { return "s3://" + p.bucket + "/" + p.prefix }

// parsePlace reads "BUCKET" or "BUCKET/PREFIX/" (a prefix without the
// final "/" gets one: "b/p" is the keys under "p/").
func parsePlace(s string) (exportPlace, error) {
	bucket, prefix, _ := strings.Cut(s, "/")
	if err := objstore.CheckBucket(bucket); err != nil {
		return exportPlace{}, err
	}
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	if prefix != "" {
		if err := checkKey(prefix); err != nil {
			return exportPlace{}, err
		}
	}
	return exportPlace{bucket: bucket, prefix: prefix}, nil
}

// places returns the places of [export] buckets (checked by
// checkObjects).
func (c ExportConfig) places() []exportPlace {
	out := make([]exportPlace, 0, len(c.Buckets))
	for _, b := range c.Buckets {
		if p, err := parsePlace(b); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// snapshotPlace is where the snapshot store keeps its objects; ok is
// false when it is not in the object store.
func (c Config) snapshotPlace() (exportPlace, bool) {
	if c.Snapshots.Store != SnapshotsS3 {
		return exportPlace{}, false
	}
	return exportPlace{bucket: c.Snapshots.Bucket, prefix: c.Snapshots.Prefix}, true
}

// overlaps says whether some key could be under both places.
func (p exportPlace) overlaps(q exportPlace) bool {
	return p.bucket == q.bucket && (strings.HasPrefix(p.prefix, q.prefix) || strings.HasPrefix(q.prefix, p.prefix))
}

// DefaultExportMax is the largest file an export stores unless the
// template says otherwise.
const DefaultExportMax = 100 << 20

// maxPresign is S3's limit on a presigned URL's life.
const maxPresign = 7 * 24 * time.Hour

// UsesObjects says whether the config needs [object_store].
func (c Config) UsesObjects() bool {
	return c.Snapshots.Store == SnapshotsS3 || len(c.Export.Buckets) > 0
}

// checkObjects checks [object_store], [snapshots] and [export].
func (c Config) checkObjects() error {
	switch c.Snapshots.Store {
	case SnapshotsLocal:
		if c.Snapshots.Bucket != "" || c.Snapshots.Prefix != "" {
			return keyErr("snapshots.bucket", fmt.Errorf("bucket and prefix are for store = %q", SnapshotsS3))
		}
	case SnapshotsS3:
		if err := objstore.CheckBucket(c.Snapshots.Bucket); err != nil {
			return keyErr("snapshots.bucket", err)
		}
	default:
		return keyErr("snapshots.store", fmt.Errorf("%q: use %q (the state directory) or %q (the [object_store] bucket)", c.Snapshots.Store, SnapshotsLocal, SnapshotsS3))
	}
	snaps, hasSnaps := c.snapshotPlace()
	for i, b := range c.Export.Buckets {
		p, err := parsePlace(b)
		if err != nil {
			return keyErr(fmt.Sprintf("export.buckets[%d]", i), err)
		}
		if hasSnaps && p.overlaps(snaps) {
			return keyErr(fmt.Sprintf("export.buckets[%d]", i), fmt.Errorf("%s overlaps the snapshot store (%s, [snapshots] bucket and prefix): an export there could forge a snapshot or plant a blob; give exports a bucket of their own, or a prefix apart from the snapshots' (buckets = [\"%s/exports/\"] with [snapshots] prefix = \"snapshots/\")", p, snaps, p.bucket))
		}
	}
	if c.Export.Presign < 0 || time.Duration(c.Export.Presign) > maxPresign {
		return keyErr("export.presign", fmt.Errorf("%s: give 0 (no URL) up to 7 days (168h)", time.Duration(c.Export.Presign)))
	}
	o := c.ObjectStore
	if (o.AccessKeyID == "") != (o.SecretAccessKey == "") {
		return keyErr("object_store.access_key_id", fmt.Errorf("give both access_key_id and secret_access_key, or neither (then AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY come from the daemon's environment)"))
	}
	return nil
}

// checkExport checks a template's export keys; it returns the key at
// fault.
func (t *Template) checkExport() (string, error) {
	if err := objstore.CheckAllowed(t.ExportTypes); err != nil {
		return "export_types", err
	}
	if t.ExportMax < 0 {
		return "export_max", fmt.Errorf("export_max must be positive")
	}
	if t.ExportMax == 0 {
		t.ExportMax = DefaultExportMax
	}
	return "", nil
}
