package testcap

import (
	"bytes"
	"context"
	"os"

	"github.com/airlock-sandbox/airlock/internal/objstore"
	"github.com/airlock-sandbox/airlock/internal/s3server"
	"github.com/airlock-sandbox/airlock/internal/testrig"
)

// probeS3 checks that the S3-compatible server of the object store's
// tests (internal/s3server, built by make s3-rig) is in the cache
// and works: it starts on a loopback port, and an object stored through
// it with its credentials reads back the same.
func probeS3(ctx context.Context) Result {
	bin, err := s3server.Find(testrig.CacheDir())
	if err != nil {
		return fail(err.Error(), s3server.Fix)
	}
	dir, err := os.MkdirTemp("", "airlock-s3probe-")
	if err != nil {
		return fail("make a directory for the probe's server: "+err.Error(), "free space in the temporary directory")
	}
	defer os.RemoveAll(dir)
	srv, err := s3server.Run(ctx, bin, dir)
	if err != nil {
		return fail("the S3 test server does not start: "+err.Error(), s3server.Fix)
	}
	defer srv.Stop()
	if err := srv.MakeBucket("probe"); err != nil {
		return fail("make a bucket: "+err.Error(), s3server.Fix)
	}
	c, err := objstore.New(objstore.Config{Endpoint: srv.Endpoint, Region: srv.Region, AccessKeyID: srv.AccessKey, SecretAccessKey: objstore.Secret(srv.SecretKey)})
	if err != nil {
		return fail(err.Error(), s3server.Fix)
	}
	want := []byte("airlock s3 probe")
	if err := c.PutBytes(ctx, "probe", "p/o", want, "text/plain", nil); err != nil {
		return fail("store an object: "+err.Error()+": "+srv.Log(5), s3server.Fix)
	}
	got, err := c.GetBytes(ctx, "probe", "p/o", 1<<10)
	if err != nil || !bytes.Equal(got, want) {
		return fail("an object does not read back as stored", s3server.Fix)
	}
	return ok("versitygw " + s3server.Version)
}
