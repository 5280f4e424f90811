package e2b

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// FuzzCreateBody: any body of an E2B create either is refused with a 4xx
// or becomes a request with a well-formed environment. Its seed corpus
// runs as a normal test.
func FuzzCreateBody(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"templateID":"base","timeout":300,"metadata":{"a":"b"},"envVars":{"K":"V"}}`,
		`{"allow_internet_access":false}`, `{"network":{"allowOut":["example.com"],"denyOut":["10.0.0.0/8"]}}`,
		`{"envVars":{"=":"x"}}`, `{"autoPause":true}`, `{"mcp":null}`, `{"volumeMounts":[{}]}`, `[]`, `null`, `{"timeout":"x"}`,
	} {
		f.Add([]byte(s))
	}
	h := &Handler{templates: map[string]string{"base": "default"}}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := httptest.NewRequest("POST", "/v2/sandboxes", bytes.NewReader(data))
		var b newSandbox
		if err := decode(httptest.NewRecorder(), r, &b); err != nil {
			mustBe4xx(t, err)
			return
		}
		env, err := envList(b.EnvVars)
		if err != nil {
			mustBe4xx(t, err)
			return
		}
		for _, e := range env {
			if k, _, ok := strings.Cut(e, "="); !ok || k == "" || strings.ContainsRune(e, 0) {
				t.Fatalf("a bad variable passed: %q", e)
			}
		}
		if err := b.unsupported(); err != nil {
			mustBe4xx(t, err)
		}
		if b.AllowInternetAccess != nil && !*b.AllowInternetAccess && (b.Network == nil || len(b.Network.AllowOut) == 0) {
			n, err := h.network("default", b)
			if err != nil || n.Mode != "none" {
				t.Fatalf("allow_internet_access false gave %+v, %v", n, err)
			}
		}
	})
}

func mustBe4xx(t *testing.T, err error) {
	t.Helper()
	var he *httpError
	if !errors.As(err, &he) || he.status < 400 || he.status >= 500 {
		t.Fatalf("want a 4xx error, got %v", err)
	}
}

// FuzzBridgeOutput: what a sandbox writes where the bridge's output goes
// is hostile. Cut into any pieces, it never crashes the reader, never
// yields a line that spans a gap it missed, and every line it yields maps
// to E2B's result without panicking.
func FuzzBridgeOutput(f *testing.F) {
	f.Add([]byte(`{"ready":true}`+"\n"+`{"id":"r","type":"result","main":true,"data":{"text/plain":"'x'","image/png":"iVBO"}}`+"\n"), uint8(3), uint8(0))
	f.Add([]byte(`{"id":"r","type":"result","data":{"text/plain":7}}`+"\n"+`{"id":"r","type":"end"}`), uint8(1), uint8(5))
	f.Add([]byte("\n\n\x00\xff{"), uint8(2), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, cut, missAt uint8) {
		var lr lineReader
		var off int64
		step := int(cut)%17 + 1
		for i := 0; i < len(data); i += step {
			piece := data[i:min(i+step, len(data))]
			ev := supervisor.OutputEvent{Stream: supervisor.StreamStdout, Offset: off, Data: piece}
			if missAt != 0 && i/step == int(missAt)%8 {
				ev.Missed, ev.Offset = 3, off+3
				off += 3
			}
			err := lr.feed(ev, func(line []byte, end int64) error {
				if bytes.IndexByte(line, '\n') >= 0 || end > ev.Offset+int64(len(piece)) {
					t.Fatalf("line %q ends at %d, past its piece", line, end)
				}
				var bl bridgeLine
				if json.Unmarshal(line, &bl) == nil && bl.Type == "result" {
					if _, err := json.Marshal(resultLine(bl.Main, bl.Data)); err != nil {
						t.Fatalf("resultLine of %q does not marshal: %v", line, err)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			off += int64(len(piece))
		}
	})
}

// FuzzMetadataQuery: any metadata filter is parsed or refused with 400.
func FuzzMetadataQuery(f *testing.F) {
	for _, s := range []string{"a=b", "a%2520b=c%2526d", "=", "%", "a=%zz&b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if _, err := parseMetadataQuery(s); err != nil {
			var he *httpError
			if !errors.As(err, &he) || he.status != http.StatusBadRequest {
				t.Fatalf("want 400, got %v", err)
			}
		}
		if _, _, err := parseCursor(s); err != nil {
			mustBe4xx(t, err)
		}
	})
}
