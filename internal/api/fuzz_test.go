package api

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzCreateBody: any body either fails to decode or check with a 4xx
// error, or becomes a request with no negative duration and a well-formed
// environment. Its seed corpus runs as a normal test.
func FuzzCreateBody(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"template":"python","ttl_seconds":60}`,
		`{"limits":{"memory_bytes":1048576,"cpus":0.5,"timeout_ms":1000}}`,
		`{"env":{"A":"b","":"x"}}`, `{"env":{"A=B":"c"}}`, `{"ttl_seconds":-5}`,
		`{"ttl_seconds":99999999999999}`, `{"limits":{"timeout_ms":-1}}`, `{"template":"../../etc"}`,
		`{"unknown":1}`, `[]`, `null`, `{"limits":null}`, `{"env":{"A":"\u0000"}}`, `{} {}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var b CreateSandboxRequest
		if err := decodeBody(bytes.NewReader(data), &b); err != nil {
			mustBeClientError(t, err)
			return
		}
		req, err := b.request()
		if err != nil {
			mustBeClientError(t, err)
			return
		}
		if req.TTL < 0 || req.IdleTimeout < 0 || req.Limits.Timeout < 0 || req.Limits.CPUTime < 0 {
			t.Fatalf("negative duration accepted: %+v", req)
		}
		for _, e := range req.Env {
			k, _, ok := strings.Cut(e, "=")
			if !ok || k == "" || strings.ContainsRune(e, 0) {
				t.Fatalf("bad env entry accepted: %q", e)
			}
		}
	})
}

// FuzzExecBody does the same for exec and process bodies.
func FuzzExecBody(f *testing.F) {
	for _, s := range []string{
		`{"argv":["echo","hi"]}`, `{"code":"print(1)","language":"python"}`,
		`{"argv":["cat"],"stdin":"aGVsbG8="}`, `{"argv":["x"],"stdin":"%%%"}`,
		`{"argv":[]}`, `{"argv":["a"],"timeout_ms":-1}`, `{"argv":["a"],"cwd":"rel"}`,
		`{"argv":["a"],"keep_stdin_open":true}`, `{"argv":["a\u0000b"]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var b StartProcessRequest
		if err := decodeBody(bytes.NewReader(data), &b); err != nil {
			mustBeClientError(t, err)
			return
		}
		req, err := b.request()
		if err != nil {
			mustBeClientError(t, err)
			return
		}
		if len(req.Argv) == 0 && req.Code == "" && req.Language == "" {
			t.Fatalf("empty command accepted: %+v", req)
		}
		if req.Timeout < 0 {
			t.Fatalf("negative timeout accepted")
		}
	})
}

func mustBeClientError(t *testing.T, err error) {
	t.Helper()
	if e := classify(err); e.Status < 400 || e.Status >= 500 {
		t.Fatalf("bad input gave %d %s: %v", e.Status, e.Code, err)
	}
}
