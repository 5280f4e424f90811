package e2b

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/objstore"
	"github.com/airlock-sandbox/airlock/internal/s3server"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot/s3store"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
	"github.com/airlock-sandbox/airlock/internal/testcap"
	"github.com/airlock-sandbox/airlock/internal/testrig"
)

// sharedDaemons are two daemons (E2B's API over a supervisor each, with
// their own state directories) whose snapshots, and so pauses, are in
// one bucket, over one fake driver, with the same two keys.
func sharedDaemons(t *testing.T) (a, b *env, snaps func() *s3store.Store) {
	t.Helper()
	testcap.Require(t, "s3")
	srv := testrig.StartS3(t)
	if err := srv.MakeBucket("pauses"); err != nil {
		t.Fatal(err)
	}
	open := func(t *testing.T, srv *s3server.Server) *s3store.Store {
		c, err := objstore.New(objstore.Config{Endpoint: srv.Endpoint, Region: srv.Region, AccessKeyID: srv.AccessKey, SecretAccessKey: objstore.Secret(srv.SecretKey)})
		if err != nil {
			t.Fatal(err)
		}
		st, err := s3store.Open(context.Background(), c, "pauses", "shared/")
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	// The keys, made once and copied into both daemons' registries.
	keys := t.TempDir()
	st, err := store.Open(keys, 0)
	if err != nil {
		t.Fatal(err)
	}
	fast := store.RateLimits{CreatesPerSecond: 1000, CreateBurst: 1000, ExecsPerSecond: 1000, ExecBurst: 1000, FilesPerSecond: 1000, FileBurst: 1000}
	var secrets [2]string
	for i := range secrets {
		_, sec, err := st.NewKeyFormat(nil, "t", store.RoleAgent, store.Quota{}, fast, time.Now(), store.FormatE2B)
		if err != nil {
			t.Fatal(err)
		}
		secrets[i] = string(sec)
	}
	st.Close()
	reg, err := os.ReadFile(filepath.Join(keys, store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	drv := &fake.Driver{Pausable: true}
	daemon := func() *env {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, store.FileName), reg, 0o600); err != nil {
			t.Fatal(err)
		}
		st, err := store.Open(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		e := newEnvOpts(t, supervisor.Options{
			Store: st, Drivers: map[string]sandbox.Driver{"native": drv}, Snapshots: open(t, srv),
			Config: supervisor.Config{StateDir: dir, Templates: []supervisor.Template{{Name: "default"}, {Name: "pooled"}}},
		}, nil)
		e.key, e.other = secrets[0], secrets[1]
		return e
	}
	return daemon(), daemon(), func() *s3store.Store { return open(t, srv) }
}

// TestPauseSharedE2B: with the pauses in a shared bucket, a sandbox
// paused through E2B's API on one daemon is listed and got as paused on
// another, for its key only, and Sandbox.connect there (POST
// /v2/sandboxes/{id}/connect) resumes it; the daemon it left answers 404;
// the older POST /sandboxes/{id}/resume takes it back; while another
// daemon holds its claim, connect answers 409.
func TestPauseSharedE2B(t *testing.T) {
	a, b, snaps := sharedDaemons(t)
	key := map[string]string{"X-API-KEY": a.key}
	other := map[string]string{"X-API-KEY": a.other}
	id := a.create(a.key, `{"templateID":"base","metadata":{"job":"x"}}`).SandboxID
	if st, body := a.do("POST", "/sandboxes/"+id+"/pause", key, nil); st != 204 {
		t.Fatalf("pause on a: %d %s", st, body)
	}
	list := func(e *env, hdr map[string]string, q string) []listedSandbox {
		t.Helper()
		st, body := e.do("GET", "/v2/sandboxes"+q, hdr, nil)
		var l []listedSandbox
		if st != 200 || json.Unmarshal(body, &l) != nil {
			t.Fatalf("list%s: %d %s", q, st, body)
		}
		return l
	}
	if l := list(b, key, "?state=paused"); len(l) != 1 || l[0].SandboxID != id || l[0].State != "paused" || l[0].Metadata["job"] != "x" {
		t.Fatalf("the key's paused list on b: %+v", l)
	}
	if l := list(b, key, ""); len(l) != 0 {
		t.Errorf("the key's running list on b: %+v", l)
	}
	if l := list(b, other, "?state=running,paused"); len(l) != 0 {
		t.Errorf("another key's list on b: %+v", l)
	}
	if st, body := b.do("GET", "/sandboxes/"+id, key, nil); st != 200 || !strings.Contains(string(body), `"state":"paused"`) {
		t.Fatalf("get on b: %d %s", st, body)
	}
	st, body := b.do("GET", "/sandboxes/"+id, other, nil)
	e2bError(t, "another key's get on b", 404, body, st)
	st, body = b.do("POST", "/v2/sandboxes/"+id+"/connect", other, strings.NewReader(`{}`))
	e2bError(t, "another key's connect on b", 404, body, st)

	// Sandbox.connect on b resumes it there.
	st, body = b.do("POST", "/v2/sandboxes/"+id+"/connect", key, strings.NewReader(`{"timeout":60}`))
	var got sandboxJSON
	if st != 201 || json.Unmarshal(body, &got) != nil || got.SandboxID != id || got.EnvdAccessToken == "" {
		t.Fatalf("connect on b: %d %s", st, body)
	}
	if st, body := b.do("POST", "/v2/sandboxes/"+id+"/connect", key, strings.NewReader(`{}`)); st != 200 {
		t.Fatalf("connect on b to the running sandbox: %d %s", st, body)
	}
	if l := list(b, key, ""); len(l) != 1 || l[0].State != "running" {
		t.Errorf("the key's running list on b after connect: %+v", l)
	}
	st, body = a.do("POST", "/v2/sandboxes/"+id+"/connect", key, strings.NewReader(`{}`))
	e2bError(t, "connect on a, which it left", 404, body, st)

	// Paused on b; another daemon holds its claim: a's connect is told.
	if st, body := b.do("POST", "/sandboxes/"+id+"/pause", key, nil); st != 204 {
		t.Fatalf("pause on b: %d %s", st, body)
	}
	release, err := snaps().ClaimPaused(context.Background(), id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	st, body = a.do("POST", "/v2/sandboxes/"+id+"/connect", key, strings.NewReader(`{}`))
	if eb := e2bError(t, "connect on a while another daemon claims it", 409, body, st); !strings.Contains(eb.Message, "being resumed by another daemon") {
		t.Errorf("the 409's message: %s", eb.Message)
	}
	release(context.Background())
	// The older SDKs' resume takes it back to a.
	if st, body := a.do("POST", "/sandboxes/"+id+"/resume", key, strings.NewReader(`{}`)); st != 201 {
		t.Fatalf("resume on a: %d %s", st, body)
	}
	// Paused on a, Sandbox.kill on b (which held it paused before it
	// moved) deletes it.
	if st, body := a.do("POST", "/sandboxes/"+id+"/pause", key, nil); st != 204 {
		t.Fatalf("pause on a: %d %s", st, body)
	}
	st, body = b.do("DELETE", "/sandboxes/"+id, other, nil)
	e2bError(t, "another key's kill on b", 404, body, st)
	if st, body := b.do("DELETE", "/sandboxes/"+id, key, nil); st != 204 {
		t.Fatalf("kill on b of the sandbox paused on a: %d %s", st, body)
	}
	st, body = b.do("GET", "/sandboxes/"+id, key, nil)
	e2bError(t, "get on b after the kill", 404, body, st)
	st, body = a.do("POST", "/v2/sandboxes/"+id+"/connect", key, strings.NewReader(`{}`))
	e2bError(t, "connect on a after the kill on b", 404, body, st)
}

// TestPauseSharedEnvd: envd's routes (the sandbox's access token, not a
// key) on a daemon that does not hold the sandbox, paused on another of
// the same bucket: made with autoResume, the request takes it up and is
// served there; without, it is answered as for a sandbox paused here;
// another sandbox's token (another key's) is refused as for a local one,
// and resumes nothing.
func TestPauseSharedEnvd(t *testing.T) {
	a, b, _ := sharedDaemons(t)
	key := map[string]string{"X-API-KEY": a.key}
	wake := a.create(a.key, `{"templateID":"base","autoPause":true,"autoResume":{"enabled":true}}`)
	sleep := a.create(a.key, `{"templateID":"base","autoPause":true}`)
	theirs := a.create(a.other, `{"templateID":"base"}`)
	h := a.envd(wake, wake.EnvdAccessToken)
	h["Content-Type"] = "application/octet-stream"
	if st, body := a.do("POST", "/files?path=kept.txt", h, strings.NewReader("state")); st != 200 {
		t.Fatalf("upload on a: %d %s", st, body)
	}
	for _, sb := range []sandboxJSON{wake, sleep} {
		if st, body := a.do("POST", "/sandboxes/"+sb.SandboxID+"/pause", key, nil); st != 204 {
			t.Fatalf("pause on a: %d %s", st, body)
		}
	}
	// Another key's sandbox's token: refused, nothing resumed.
	st, body := b.do("GET", "/files?path=kept.txt", b.envd(wake, theirs.EnvdAccessToken), nil)
	e2bError(t, "envd on b with another sandbox's token", 401, body, st)
	if st, body := b.do("GET", "/sandboxes/"+wake.SandboxID, key, nil); st != 200 || !strings.Contains(string(body), `"state":"paused"`) {
		t.Fatalf("get on b after the refused request: %d %s", st, body)
	}
	// Without autoResume: as for one paused here.
	st, body = b.do("GET", "/files?path=kept.txt", b.envd(sleep, sleep.EnvdAccessToken), nil)
	if eb := e2bError(t, "envd on b for a sandbox paused on a without autoResume", 502, body, st); !strings.Contains(eb.Message, "paused") {
		t.Errorf("its message: %s", eb.Message)
	}
	// With autoResume: taken up on b and served.
	if st, body := b.do("GET", "/files?path=kept.txt", b.envd(wake, wake.EnvdAccessToken), nil); st != 200 || string(body) != "state" {
		t.Fatalf("envd on b for a sandbox paused on a with autoResume: %d %q", st, body)
	}
	if st, body := b.do("GET", "/sandboxes/"+wake.SandboxID, key, nil); st != 200 || !strings.Contains(string(body), `"state":"running"`) {
		t.Fatalf("get on b after: %d %s", st, body)
	}
	st, body = a.do("POST", "/v2/sandboxes/"+wake.SandboxID+"/connect", key, strings.NewReader(`{}`))
	e2bError(t, "connect on a, which it left", 404, body, st)
}

// countingPauses counts the reads of paused sandboxes' records in the
// bucket.
type countingPauses struct {
	*s3store.Store
	gets atomic.Int32
}

func (c *countingPauses) GetPaused(ctx context.Context, id string) ([]byte, error) {
	c.gets.Add(1)
	return c.Store.GetPaused(ctx, id)
}

// TestEnvdStrangersBucketReads: requests on envd's routes for ids this
// daemon does not hold, without a token, read the shared bucket (where a
// sandbox paused elsewhere would be) only as often as the rate limit of
// such requests lets them through: guessing ids does not make the daemon
// read the bucket at the guesser's rate.
func TestEnvdStrangersBucketReads(t *testing.T) {
	_, _, snaps := sharedDaemons(t)
	counted := &countingPauses{Store: snaps()}
	e := newEnvOpts(t, supervisor.Options{
		Drivers: map[string]sandbox.Driver{"native": &fake.Driver{Pausable: true}}, Snapshots: counted,
		Config: supervisor.Config{StateDir: t.TempDir(), Templates: []supervisor.Template{{Name: "default"}}},
	}, nil)
	const n = 3 * strangerBurst
	limited := 0
	for i := range n {
		id := fmt.Sprintf("sb-%012x", i)
		st, _ := e.do("GET", "/files?path=x", map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": envdPort}, nil)
		switch st {
		case 429:
			limited++
		case 401:
		default:
			t.Fatalf("request %d: %d", i, st)
		}
	}
	if got := int(counted.gets.Load()); got > strangerBurst+5 || limited == 0 {
		t.Errorf("%d requests for ids not here without a token: %d reads of the bucket, %d answered 429; want at most the strangers' burst (%d) of reads", n, got, limited, strangerBurst)
	}
}
