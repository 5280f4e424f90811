package e2b

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestInternetOnTemplateWithoutNetwork: allowInternetAccess true on a
// template whose network mode is none is refused with 403, as documented
// (security review 2: it was 201, and the sandbox had no network).
func TestInternetOnTemplateWithoutNetwork(t *testing.T) {
	e := newEnv(t, nil)
	key := map[string]string{"X-API-KEY": e.key}
	for _, body := range []string{`{"allow_internet_access":true}`, `{"templateID":"base","allow_internet_access":true}`, `{"templateID":"base","allowInternetAccess":true}`} {
		st, b := e.do("POST", "/sandboxes", key, strings.NewReader(body))
		if eb := e2bError(t, "create "+body, 403, b, st); !strings.Contains(eb.Message, "no network") {
			t.Errorf("create %s: %q", body, eb.Message)
		}
	}
}

// TestWatchDirCap: of 20 concurrent WatchDir streams on one sandbox, each
// gets its response headers at once: a stream within the cap its start,
// one past it a 429 (security review 2: 16 of 20 got no headers in 30 s).
func TestWatchDirCap(t *testing.T) { watchDirCap(t, newEnv(t, nil)) }

func watchDirCap(t *testing.T, e *env) {
	sb := e.create(e.key, `{}`)
	if st, b := e.rpc(sb, "/filesystem.Filesystem/MakeDir", `{"path":"w"}`); st != 200 {
		t.Fatalf("MakeDir: %d %s", st, b)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type answer struct {
		status int
		err    error
	}
	answers := make(chan answer, 20)
	for range 20 {
		go func() {
			body := `{"path":"w"}`
			var req bytes.Buffer
			req.WriteByte(0)
			_ = binary.Write(&req, binary.BigEndian, uint32(len(body)))
			req.WriteString(body)
			r, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/filesystem.Filesystem/WatchDir", &req)
			for k, v := range e.envd(sb, sb.EnvdAccessToken) {
				r.Header.Set(k, v)
			}
			r.Header.Set("Content-Type", "application/connect+json")
			res, err := http.DefaultClient.Do(r)
			if err != nil {
				answers <- answer{err: err}
				return
			}
			answers <- answer{status: res.StatusCode}
			if res.StatusCode != 200 {
				res.Body.Close()
				return
			}
			// Hold the stream open until the test ends.
			go func() { _, _ = io.Copy(io.Discard, res.Body); res.Body.Close() }()
		}()
	}
	got := map[int]int{}
	timeout := time.After(5 * time.Second)
	for range 20 {
		select {
		case a := <-answers:
			if a.err != nil {
				t.Fatal(a.err)
			}
			got[a.status]++
		case <-timeout:
			t.Fatalf("after 5 s, %v: the others have no response headers", got)
		}
	}
	if got[200] != maxWatchStreams || got[429] != 20-maxWatchStreams {
		t.Fatalf("answers %v, want %d 200 and %d 429", got, maxWatchStreams, 20-maxWatchStreams)
	}
	// The key can still make other calls.
	if st, b := e.rpc(sb, "/filesystem.Filesystem/Stat", `{"path":"w"}`); st != 200 {
		t.Fatalf("Stat beside the watches: %d %s", st, b)
	}
}

// TestEnvdStrangers: without a sandbox's token, an unknown, ended,
// pooled or another key's sandbox id gets the very answer a live one
// does, and such requests are rate limited while requests with the token
// go on (security review 2, N8: the answers told ids apart, and said how
// an ended sandbox ended).
func TestEnvdStrangers(t *testing.T) {
	e := newEnv(t, nil)
	mine := e.create(e.key, `{}`)
	ended := e.create(e.key, `{}`)
	theirs := e.create(e.other, `{}`)
	if st, _ := e.do("DELETE", "/sandboxes/"+ended.SandboxID, map[string]string{"X-API-KEY": e.key}, nil); st != 204 {
		t.Fatalf("kill: %d", st)
	}
	health := func(id, tok string) (int, string) {
		hdr := e.envd(sandboxJSON{SandboxID: id}, tok)
		if tok == "" {
			delete(hdr, "X-Access-Token")
		}
		st, b := e.do("GET", "/files?path=/x", hdr, nil)
		return st, string(b)
	}
	wantSt, want := health(mine.SandboxID, "")
	if wantSt != 401 {
		t.Fatalf("a live sandbox without its token: %d %s", wantSt, want)
	}
	for _, tc := range []struct{ what, id, tok string }{
		{"a live sandbox, a wrong token", mine.SandboxID, "x"},
		{"an unknown id", "sb-ffffffffffff", ""},
		{"an unknown id with a token", "sb-ffffffffffff", mine.EnvdAccessToken},
		{"an ended sandbox", ended.SandboxID, ""},
		{"an ended sandbox with another's token", ended.SandboxID, mine.EnvdAccessToken},
		{"another key's sandbox with my token", theirs.SandboxID, mine.EnvdAccessToken},
		{"not an id", "../x", ""},
	} {
		if st, b := health(tc.id, tc.tok); st != wantSt || b != want {
			t.Errorf("%s: %d %s, want %d %s", tc.what, st, b, wantSt, want)
		}
	}
	// The holder of an ended sandbox's token learns it is gone.
	if st, b := health(ended.SandboxID, ended.EnvdAccessToken); st != 502 {
		t.Errorf("an ended sandbox with its token: %d %s", st, b)
	}
	// Past the allowance, requests without the token get 429; with it,
	// they go on.
	limited := 0
	for range strangerBurst + 10 {
		if st, _ := health("sb-ffffffffffff", ""); st == 429 {
			limited++
		}
	}
	if limited == 0 {
		t.Errorf("%d requests without a token: none was limited", strangerBurst+10)
	}
	if st, b := health(mine.SandboxID, mine.EnvdAccessToken); st == 429 || st == 401 {
		t.Errorf("a request with the token, after the flood: %d %s", st, b)
	}
}
