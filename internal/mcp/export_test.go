package mcp_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/mcp"
	"github.com/airlock-sandbox/airlock/internal/objstore"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
	"github.com/airlock-sandbox/airlock/internal/testcap"
	"github.com/airlock-sandbox/airlock/internal/testrig"
)

func (f *fakeBackend) Export(context.Context, string, client.ExportRequest) (*client.ExportResult, error) {
	return nil, &sandbox.UnsupportedError{What: "export", Why: "the fake backend has no object store"}
}

// The fake backend's sandboxes have no copy-on-write mount.
func (f *fakeBackend) Changes(context.Context, string) ([]client.CowMount, error) { return nil, nil }

func (f *fakeBackend) ApplyChanges(_ context.Context, id string, _ client.ChangesRequest) (*client.ApplyResult, error) {
	return nil, fmt.Errorf("%w: sandbox %s has no cow mount", sandbox.ErrNotFound, id)
}

func (f *fakeBackend) DiscardChanges(_ context.Context, id string, _ client.ChangesRequest) (*client.DiscardResult, error) {
	return nil, fmt.Errorf("%w: sandbox %s has no cow mount", sandbox.ErrNotFound, id)
}

// TestExportTool: sandbox_export stores a session's file in a real S3
// server (versitygw) and names the object, its type and digest; a file
// whose bytes are not an allowed type is refused in words a model can act
// on, and nothing is stored.
func TestExportTool(t *testing.T) {
	testcap.Require(t, "s3")
	srv := testrig.StartS3(t)
	if err := srv.MakeBucket("agent-outputs"); err != nil {
		t.Fatal(err)
	}
	objects, err := objstore.New(objstore.Config{Endpoint: srv.Endpoint, Region: srv.Region, AccessKeyID: srv.AccessKey, SecretAccessKey: objstore.Secret(srv.SecretKey)})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	mem := &atomic.Int64{}
	mem.Store(64 << 30)
	sup, err := supervisor.New(supervisor.Options{
		Store: st, Drivers: map[string]sandbox.Driver{"native": &fake.Driver{}}, Objects: objects,
		Config: supervisor.Config{
			Templates: []supervisor.Template{{Name: "default", ExportTypes: []string{"text/csv"}}},
			Export:    supervisor.ExportConfig{Buckets: []string{"agent-outputs"}},
		},
		MemAvailable: func() (int64, error) { return mem.Load(), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sup.Close(context.Background()); st.Close() })
	cs := connect(t, newServer(t, &mcp.Local{Sup: sup, Caller: supervisor.Caller{KeyID: "k1"}}))

	res, text, _ := call(t, cs, "write_file", map[string]any{"path": "out/table.txt", "content": "a,b\n1,2\n3,4\n"})
	if res.IsError {
		t.Fatal(text)
	}
	res, text, sc := call(t, cs, "sandbox_export", map[string]any{"path": "out/table.txt", "to": "s3://agent-outputs/session-1/", "exec_id": "ex-1"})
	if res.IsError || !strings.Contains(text, "s3://agent-outputs/session-1/table.txt (text/csv") {
		t.Fatalf("sandbox_export: %v\n%s", sc, text)
	}
	b, err := objects.GetBytes(context.Background(), "agent-outputs", "session-1/table.txt", 1<<10)
	if err != nil || string(b) != "a,b\n1,2\n3,4\n" {
		t.Fatalf("the object holds %q, %v", b, err)
	}
	res, text, _ = call(t, cs, "write_file", map[string]any{"path": "out/fake.csv", "content": "%PDF-1.4\n%%EOF\n"})
	if res.IsError {
		t.Fatal(text)
	}
	res, text, _ = call(t, cs, "sandbox_export", map[string]any{"path": "/workspace/out/fake.csv", "to": "s3://agent-outputs/session-1/"})
	if !res.IsError || !strings.Contains(text, "application/pdf") || !strings.Contains(text, "exports only text/csv") {
		t.Fatalf("a PDF named .csv: %s", text)
	}
	if _, err := objects.GetBytes(context.Background(), "agent-outputs", "session-1/fake.csv", 1<<10); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("the refused file was stored: %v", err)
	}
}
