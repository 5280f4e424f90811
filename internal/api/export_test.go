package api

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/objstore"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
	"github.com/airlock-sandbox/airlock/internal/testcap"
	"github.com/airlock-sandbox/airlock/internal/testrig"
)

// TestExportRoute: POST /v1/sandboxes/{id}/export through the Go SDK, to a
// real S3 server (versitygw): a stored CSV, and each refusal with its
// status and code: 415 type_refused, 413 too_large, 403 forbidden, 501
// without an object store, 502 store_denied and store_unavailable.
func TestExportRoute(t *testing.T) {
	testcap.Require(t, "s3")
	srv := testrig.StartS3(t)
	if err := srv.MakeBucket("agent-outputs"); err != nil {
		t.Fatal(err)
	}
	objects := func(secret string) *objstore.Client {
		c, err := objstore.New(objstore.Config{Endpoint: srv.Endpoint, Region: srv.Region, AccessKeyID: srv.AccessKey, SecretAccessKey: objstore.Secret(secret)})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	cfg := supervisor.Config{
		Templates: []supervisor.Template{{Name: "default", ExportTypes: []string{"text/csv"}, ExportMax: 1 << 10}},
		Export:    supervisor.ExportConfig{Buckets: []string{"agent-outputs"}},
	}
	ctx := context.Background()
	sandboxWith := func(c *client.Client, files map[string]string) string {
		t.Helper()
		sb, err := c.CreateSandbox(ctx, client.CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for p, content := range files {
			if err := c.WriteFile(ctx, sb.ID, p, strings.NewReader(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return sb.ID
	}
	csv := "a,b\n1,2\n"
	files := map[string]string{"/workspace/a.csv": csv, "/workspace/img.csv": "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "/workspace/big.csv": strings.Repeat("a,b\n", 300)}

	e := startEnv(t, &fake.Driver{}, envOptions{cfg: cfg, objects: objects(srv.SecretKey)})
	c := e.agent()
	id := sandboxWith(c, files)
	r, err := c.Export(ctx, id, client.ExportRequest{Path: "/workspace/a.csv", To: "s3://agent-outputs/api/", Exec: "ex-9"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Objects) != 1 || r.Objects[0].Object != "s3://agent-outputs/api/a.csv" || r.Objects[0].Size != int64(len(csv)) || !strings.HasPrefix(r.Objects[0].ContentType, "text/csv") {
		t.Fatalf("export = %+v", r)
	}
	if b, err := objects(srv.SecretKey).GetBytes(ctx, "agent-outputs", "api/a.csv", 1<<10); err != nil || !bytes.Equal(b, []byte(csv)) {
		t.Fatalf("stored %q, %v", b, err)
	}
	_, err = c.Export(ctx, id, client.ExportRequest{Path: "/workspace/img.csv", To: "s3://agent-outputs/api/"})
	apiError(t, err, 415, "type_refused")
	_, err = c.Export(ctx, id, client.ExportRequest{Path: "/workspace/big.csv", To: "s3://agent-outputs/api/"})
	apiError(t, err, 413, "too_large")
	_, err = c.Export(ctx, id, client.ExportRequest{Path: "/workspace/a.csv", To: "s3://other-bucket/api/"})
	apiError(t, err, 403, "forbidden")
	_, err = c.Export(ctx, id, client.ExportRequest{Path: "/workspace/a.csv", To: "/tmp/x"})
	apiError(t, err, 400, "invalid")

	none := startEnv(t, &fake.Driver{}, envOptions{cfg: cfg})
	nc := none.agent()
	_, err = nc.Export(ctx, sandboxWith(nc, files), client.ExportRequest{Path: "/workspace/a.csv", To: "s3://agent-outputs/api/"})
	apiError(t, err, 501, "unsupported")

	denied := startEnv(t, &fake.Driver{}, envOptions{cfg: cfg, objects: objects("wrong")})
	dc := denied.agent()
	_, err = dc.Export(ctx, sandboxWith(dc, files), client.ExportRequest{Path: "/workspace/a.csv", To: "s3://agent-outputs/api/"})
	apiError(t, err, 502, "store_denied")

	srv.Stop()
	_, err = c.Export(ctx, id, client.ExportRequest{Path: "/workspace/a.csv", To: "s3://agent-outputs/api2/"})
	if ce := apiError(t, err, 502, "store_unavailable"); !strings.Contains(ce.Message, srv.Endpoint) {
		t.Fatalf("the message does not name the store: %s", ce.Message)
	}
}
