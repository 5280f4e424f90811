package e2b

import (
	"encoding/json"
	"io/fs"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// TestProto3JSON: what goes out is proto3's JSON as the SDKs parse it
// (int64 as a string, bytes in base64, enums by name, defaults left out),
// and what comes in may be written either way proto3 allows.
func TestProto3JSON(t *testing.T) {
	mt := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	target := "t"
	for _, c := range []struct {
		name string
		v    any
		want string
	}{
		{"entry", entryInfo{Name: "a", Type: fileTypeSymlink, Path: "/workspace/a", Size: 1 << 40, Mode: 0o644, Permissions: "-rw-r--r--", ModifiedTime: &mt, SymlinkTarget: &target},
			`{"name":"a","type":"FILE_TYPE_SYMLINK","path":"/workspace/a","size":"1099511627776","mode":420,"permissions":"-rw-r--r--","modifiedTime":"2026-01-02T03:04:05.0000006Z","symlinkTarget":"t"}`},
		{"empty entry", entryInfo{}, `{}`},
		{"data", eventResponse{Event: processEvent{Data: &dataEvent{Stderr: []byte{0, 0xff, 'x'}}}}, `{"event":{"data":{"stderr":"AP94"}}}`},
		{"start", eventResponse{Event: processEvent{Start: &startEvent{PID: 7}}}, `{"event":{"start":{"pid":7}}}`},
		{"keepalive", watchResponse{Keepalive: &struct{}{}}, `{"keepalive":{}}`},
		{"a zero exit", endOf(&sandbox.Result{Reason: sandbox.ReasonExit}), `{"exited":true,"status":"exit status 0"}`},
	} {
		b, err := json.Marshal(c.v)
		if err != nil || string(b) != c.want {
			t.Errorf("%s: %s, %v; want %s", c.name, b, err, c.want)
		}
	}
	var ld listDirRequest
	if err := (jsonCodec{}).Unmarshal([]byte(`{"path":"x","depth":"3"}`), &ld); err != nil || ld.Depth != 3 {
		t.Errorf("depth as a string: %+v, %v", ld, err)
	}
	var sel sendSignalRequest
	for in, want := range map[string]signal{`{"signal":"SIGNAL_SIGTERM"}`: 15, `{"signal":9}`: 9, `{}`: 0} {
		sel = sendSignalRequest{}
		if err := json.Unmarshal([]byte(in), &sel); err != nil || sel.Signal != want {
			t.Errorf("%s: signal %d, %v", in, sel.Signal, err)
		}
	}
	for _, in := range []string{`{"signal":"SIGHUP"}`, `{"signal":{}}`, `{"process":{"pid":-1}}`, `{"process":{"pid":"x"}}`, `{"process":{"pid":4294967296}}`} {
		if err := json.Unmarshal([]byte(in), &sendSignalRequest{}); err == nil {
			t.Errorf("%s was accepted", in)
		}
	}
	var in sendInputRequest
	if err := json.Unmarshal([]byte(`{"process":{"pid":2},"input":{"pty":"aGk="}}`), &in); err != nil || in.Input.PTY == nil || string(*in.Input.PTY) != "hi" || in.Input.Stdin != nil {
		t.Errorf("pty input: %+v, %v", in, err)
	}
	if err := (jsonCodec{}).Unmarshal(nil, &in); err != nil {
		t.Errorf("an empty message: %v", err)
	}
}

func TestEndOf(t *testing.T) {
	for _, c := range []struct {
		res  *sandbox.Result
		want string
	}{
		{&sandbox.Result{ExitCode: 2, Reason: sandbox.ReasonExit}, `{"exitCode":2,"exited":true,"status":"exit status 2","error":"exit status 2"}`},
		{&sandbox.Result{ExitCode: -1, Signal: "SIGTERM", Reason: sandbox.ReasonKilled}, `{"exitCode":-1,"status":"signal: terminated","error":"signal: terminated"}`},
		{&sandbox.Result{ExitCode: -1, Signal: "SIGKILL", Reason: sandbox.ReasonTimeout, Message: "timed out after 1s"}, `{"exitCode":-1,"status":"signal: killed","error":"timed out after 1s"}`},
		{&sandbox.Result{ExitCode: 137, Reason: sandbox.ReasonOOM, Message: "memory limit"}, `{"exitCode":137,"exited":true,"status":"exit status 137","error":"memory limit"}`},
		{nil, `{"exitCode":-1,"status":"unknown","error":"airlock lost the process"}`},
	} {
		b, _ := json.Marshal(endOf(c.res))
		if string(b) != c.want {
			t.Errorf("endOf(%+v) = %s, want %s", c.res, b, c.want)
		}
	}
}

func TestResultLine(t *testing.T) {
	data := map[string]json.RawMessage{
		"text/plain": json.RawMessage(`"'quoted'"`), "text/html": json.RawMessage(`"<b>x</b>"`), "image/png": json.RawMessage(`"iVBO"`),
		"application/json": json.RawMessage(`{"a":1}`), "application/vnd.custom": json.RawMessage(`"c"`),
	}
	b, _ := json.Marshal(resultLine(true, data))
	want := `{"extra":{"application/vnd.custom":"c"},"html":"\u003cb\u003ex\u003c/b\u003e","is_main_result":true,"json":{"a":1},"png":"iVBO","text":"quoted","type":"result"}`
	if string(b) != want {
		t.Errorf("resultLine = %s\nwant %s", b, want)
	}
}

func TestExecTimeout(t *testing.T) {
	for _, c := range []struct {
		hdr     string
		ceiling time.Duration
		want    time.Duration
		refused bool
	}{
		// No template timeout: the client's stands, none is none.
		{hdr: "", want: 0}, {hdr: "0", want: 0}, {hdr: "x", want: 0},
		{hdr: "1500", want: 1500 * time.Millisecond}, {hdr: "60000", want: time.Minute},
		{hdr: "86400000", want: 24 * time.Hour},
		// A template timeout bounds it: more is refused, none gets it.
		{hdr: "", ceiling: 30 * time.Second, want: 30 * time.Second},
		{hdr: "30000", ceiling: 30 * time.Second, want: 30 * time.Second},
		{hdr: "1500", ceiling: 30 * time.Second, want: 1500 * time.Millisecond},
		{hdr: "60000", ceiling: 30 * time.Second, refused: true},
	} {
		h := http.Header{}
		if c.hdr != "" {
			h.Set("Connect-Timeout-Ms", c.hdr)
		}
		got, err := execTimeout(h, "tmpl", c.ceiling)
		if c.refused {
			if err == nil || !strings.Contains(err.Error(), `template "tmpl" allows`) {
				t.Errorf("Connect-Timeout-Ms %q, ceiling %s: %s, %v; want refused", c.hdr, c.ceiling, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("Connect-Timeout-Ms %q, ceiling %s: %s, %v; want %s", c.hdr, c.ceiling, got, err, c.want)
		}
	}
}

func TestDiff(t *testing.T) {
	at := time.Unix(100, 0)
	f := func(typ string, size int64, mode fs.FileMode, mt time.Time) seen {
		return seen{info: sandbox.FileInfo{Type: typ, Size: size, Mode: mode, ModTime: mt}}
	}
	before := map[string]seen{"kept": f("file", 1, 0o644, at), "grown": f("file", 1, 0o644, at), "gone": f("file", 1, 0o644, at), "chmod": f("file", 1, 0o644, at), "swap": f("file", 1, 0o644, at), "d": f("dir", 0, 0o755, at)}
	after := map[string]seen{"kept": f("file", 1, 0o644, at), "grown": f("file", 2, 0o644, at), "chmod": f("file", 1, 0o600, at), "swap": f("dir", 0, 0o755, at), "d": f("dir", 0, 0o755, at.Add(time.Second)), "new": f("file", 0, 0o644, at)}
	var got []string
	for _, ev := range diff(before, after, false) {
		got = append(got, ev.Type+" "+ev.Name)
	}
	want := "EVENT_TYPE_REMOVE gone,EVENT_TYPE_REMOVE swap,EVENT_TYPE_CHMOD chmod,EVENT_TYPE_WRITE grown,EVENT_TYPE_CREATE new,EVENT_TYPE_CREATE swap"
	if strings.Join(got, ",") != want {
		t.Errorf("diff = %s\nwant %s", strings.Join(got, ","), want)
	}
}

func TestLineReader(t *testing.T) {
	var lr lineReader
	var lines []string
	var ends []int64
	fn := func(l []byte, end int64) error {
		lines = append(lines, string(l))
		ends = append(ends, end)
		return nil
	}
	feed := func(off, missed int64, s string) {
		if err := lr.feed(supervisor.OutputEvent{Offset: off, Missed: missed, Data: []byte(s)}, fn); err != nil {
			t.Fatal(err)
		}
	}
	feed(0, 0, "one\ntw")
	feed(6, 0, "o\nthr")
	// Ten bytes were dropped: "thr…" is cut, the next whole line counts.
	feed(19, 10, "ee\nfour\n")
	if strings.Join(lines, ",") != "one,two,four" || ends[2] != 27 || lr.missed != 10 {
		t.Fatalf("lines %q, ends %v, missed %d", lines, ends, lr.missed)
	}
}

func TestMetadataQueryAndCursor(t *testing.T) {
	// What the SDK sends for {"a b": "c&d=e"}: each side escaped, then the
	// pairs as a query string, which the URL escapes once more.
	got, err := parseMetadataQuery("a%2520b=c%2526d%253De")
	if err != nil || len(got) != 1 || got["a b"] != "c&d=e" {
		t.Fatalf("parseMetadataQuery = %v, %v", got, err)
	}
	if _, err := parseMetadataQuery("a=%zz"); err == nil {
		t.Fatal("a bad escape was accepted")
	}
	at := time.Unix(0, 1234567890123456789)
	ts, id, err := parseCursor(cursor(at, "sb-0123456789ab"))
	if err != nil || !ts.Equal(at) || id != "sb-0123456789ab" {
		t.Fatalf("cursor round trip: %v %q %v", ts, id, err)
	}
	for _, bad := range []string{"", "x", cursor(at, "../etc"), "MTIz"} {
		if _, _, err := parseCursor(bad); err == nil {
			t.Errorf("cursor %q was accepted", bad)
		}
	}
}

func TestEgressOf(t *testing.T) {
	n, err := egressOf([]string{"127.0.0.1:8080", "[::1]:443", "example.com", "*.pypi.org:443"}, []string{"0.0.0.0/0", "::/0", "10.0.0.0/8", "bad.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	want := sandbox.Network{Mode: sandbox.NetworkEgress,
		AllowHosts: []string{"example.com", "*.pypi.org:443"}, AllowAddresses: []string{"127.0.0.1:8080", "[::1]:443"},
		Deny: []string{"10.0.0.0/8", "bad.example.com"}}
	if !reflect.DeepEqual(n, want) {
		t.Errorf("egressOf = %+v\nwant %+v", n, want)
	}
	for _, bad := range []string{"10.1.2.3", "10.0.0.0/8", "0.0.0.0/0", "exa mple.com"} {
		if _, err := egressOf([]string{bad}, nil); err == nil {
			t.Errorf("allowOut %q: no error", bad)
		}
	}
}
