package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/internal/objstore"
	"github.com/airlock-sandbox/airlock/internal/s3server"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// exportRows: a file streamed from a native sandbox into an S3 server on
// loopback (the tests' versitygw, from the cache `make s3-rig` fills), and
// what that server takes from a plain upload of the same size, through
// the same client, for comparison.
func exportRows(ctx context.Context, o Options, drv sandbox.Driver, drvErr error, progress func(string, ...any)) []Row {
	rows := []Row{
		{Section: "export", ID: "export/direct", What: "upload of a file to an S3 server on loopback (versitygw), from the host (higher is better)", Unit: UnitMiBps},
		{Section: "export", ID: "export/throughput", What: "export of the same file from a native sandbox, type checked and hashed (higher is better)", Unit: UnitMiBps,
			Compare: []Comparison{{Baseline: "export/direct", Name: "direct"}}},
	}
	set := func(status Status, detail string) []Row {
		for i := range rows {
			rows[i].Status, rows[i].Detail = status, detail
		}
		return rows
	}
	if drvErr != nil {
		return set(StatusFailed, fmt.Sprintf("the native driver cannot run here: %v", drvErr))
	}
	bin, err := s3server.Find(s3server.Cache())
	if err != nil {
		return set(StatusMissing, err.Error()+": "+s3server.Fix)
	}
	size := int64(256 << 20)
	if o.Quick {
		size = 32 << 20
	}
	dir, err := os.MkdirTemp("", "airlock-bench-export-")
	if err != nil {
		return set(StatusFailed, err.Error())
	}
	defer os.RemoveAll(dir)
	srv, err := s3server.Run(ctx, bin, filepath.Join(dir, "s3"))
	if err != nil {
		return set(StatusFailed, err.Error())
	}
	defer srv.Stop()
	if err := srv.MakeBucket("bench"); err != nil {
		return set(StatusFailed, err.Error())
	}
	objects, err := objstore.New(objstore.Config{Endpoint: srv.Endpoint, Region: srv.Region, AccessKeyID: srv.AccessKey, SecretAccessKey: objstore.Secret(srv.SecretKey)})
	if err != nil {
		return set(StatusFailed, err.Error())
	}
	st, err := store.Open(dir, time.Second)
	if err != nil {
		return set(StatusFailed, err.Error())
	}
	defer st.Close()
	cfg := supervisor.Config{
		Templates: []supervisor.Template{{Name: supervisor.DefaultTemplate, Driver: "native", Memory: 1 << 30, Disk: 1 << 30,
			Timeout: supervisor.Duration(60 * time.Second), ExportTypes: []string{"application/octet-stream"}, ExportMax: supervisor.Size(size)}},
		Export: supervisor.ExportConfig{Buckets: []string{"bench"}},
	}
	sup, err := supervisor.New(supervisor.Options{Store: st, Drivers: map[string]sandbox.Driver{"native": drv}, Objects: objects, Config: cfg})
	if err != nil {
		return set(StatusFailed, err.Error())
	}
	defer sup.Close(context.WithoutCancel(ctx))
	c := supervisor.Caller{KeyID: "bench", Quota: store.Quota{MaxSandboxes: 4},
		Rate: store.RateLimits{CreatesPerSecond: 1000, CreateBurst: 1000, ExecsPerSecond: 1e6, ExecBurst: 1e6, FilesPerSecond: 1e6, FileBurst: 1e6, MaxInFlight: 64}}
	in, err := sup.Create(ctx, c, supervisor.CreateRequest{})
	if err != nil {
		return set(StatusFailed, err.Error())
	}
	defer func() { _ = sup.Kill(context.WithoutCancel(ctx), c, in.ID) }()
	progress("export: a %d MiB file to versitygw on loopback, direct and from a sandbox", size>>20)
	code := fmt.Sprintf("import os\nwith open('/workspace/blob', 'wb') as f:\n    f.write(b'\\0' + os.urandom(%d))\n", size-1)
	res, err := sup.Exec(ctx, c, in.ID, supervisor.ExecRequest{Code: code, Language: "python"})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("the workload failed: %s %s", res.Reason, res.Message)
	}
	if err != nil {
		return set(StatusFailed, err.Error())
	}
	// The direct upload: the same bytes from a host file.
	files, done, err := sup.Files(ctx, c, in.ID)
	if err != nil {
		return set(StatusFailed, err.Error())
	}
	host, err := os.OpenFile(filepath.Join(dir, "blob"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		err = files.ReadFile(ctx, "/workspace/blob", 0, 0, host)
	}
	done()
	if err != nil {
		return set(StatusFailed, err.Error())
	}
	if _, err := host.Seek(0, 0); err != nil {
		return set(StatusFailed, err.Error())
	}
	start := time.Now()
	_, err = objects.Put(ctx, objstore.Upload{Bucket: "bench", Key: "direct/blob"}, host, nil)
	host.Close()
	if err != nil {
		rows[0].Status, rows[0].Detail = StatusFailed, err.Error()
	} else {
		rows[0].Status, rows[0].Value = StatusOK, ptr(float64(size)/(1<<20)/time.Since(start).Seconds())
	}
	start = time.Now()
	r, err := sup.Export(ctx, c, supervisor.ExportRequest{Sandbox: in.ID, Path: "/workspace/blob", To: "s3://bench/export/"})
	if err == nil && r.Bytes != size {
		err = fmt.Errorf("exported %d bytes of %d", r.Bytes, size)
	}
	if err != nil {
		rows[1].Status, rows[1].Detail = StatusFailed, err.Error()
	} else {
		rows[1].Status, rows[1].Value = StatusOK, ptr(float64(size)/(1<<20)/time.Since(start).Seconds())
	}
	return rows
}
