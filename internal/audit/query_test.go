package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

type queried struct {
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Kind    Kind      `json:"kind"`
	Key     string    `json:"key"`
	Sandbox string    `json:"sandbox"`
	Code    string    `json:"code"`
}

func decodePage(t *testing.T, p Page) []queried {
	t.Helper()
	out := make([]queried, len(p.Events))
	for i, raw := range p.Events {
		if err := json.Unmarshal(raw, &out[i]); err != nil {
			t.Fatalf("event %d: %v: %s", i, err, raw)
		}
	}
	return out
}

// queryAll pages through q to the end and returns every event, newest
// first, and the number of pages.
func queryAll(t *testing.T, l *Log, q Query) ([]queried, int) {
	t.Helper()
	var all []queried
	pages := 0
	for {
		p, err := l.Query(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		all = append(all, decodePage(t, p)...)
		if p.Next == "" {
			return all, pages
		}
		if pages > 10000 {
			t.Fatal("paging does not end")
		}
		q.Before = p.Next
	}
}

func TestQuery(t *testing.T) {
	dir := t.TempDir()
	clock := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	var minute atomic.Int64
	l, err := Open(filepath.Join(dir, "audit.log"), Options{Key: newKey(t), CheckpointEvery: 7, Now: func() time.Time { return clock.Add(time.Duration(minute.Load()) * time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	// 300 events over 300 minutes, three sandboxes, two keys, two kinds;
	// one holds a key with characters JSON escapes, one a line longer than
	// the scanner's chunk.
	for i := range 300 {
		minute.Store(int64(i))
		ev := Event{Kind: KindExec, Key: fmt.Sprintf("k%d", i%2), Sandbox: fmt.Sprintf("sb-%d", i%3), Code: fmt.Sprint(i)}
		if i%5 == 0 {
			ev.Kind = KindEgress
		}
		switch i {
		case 100:
			ev.Key = `<k&"1">`
		case 200:
			ev.Code = strings.Repeat("x", 3*backChunk)
		}
		if err := l.Append(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	all, _ := queryAll(t, l, Query{})
	seqs := map[uint64]bool{}
	for i, ev := range all {
		if seqs[ev.Seq] || (i > 0 && ev.Seq >= all[i-1].Seq) {
			t.Fatalf("event seq %d out of order or repeated", ev.Seq)
		}
		seqs[ev.Seq] = true
	}
	// every line of the file, checkpoints included
	if want := strings.Count(string(mustRead(t, l.path)), "\n"); len(all) != want {
		t.Fatalf("query without a filter found %d events, the log has %d lines", len(all), want)
	}
	for _, tc := range []struct {
		name string
		q    Query
		want func(i int) bool
	}{
		{"sandbox", Query{Sandbox: "sb-1"}, func(i int) bool { return i%3 == 1 }},
		{"key", Query{Key: "k0"}, func(i int) bool { return i%2 == 0 && i != 100 }},
		{"escaped key", Query{Key: `<k&"1">`}, func(i int) bool { return i == 100 }},
		{"kind", Query{Kinds: []Kind{KindEgress}}, func(i int) bool { return i%5 == 0 }},
		{"two kinds", Query{Kinds: []Kind{KindEgress, KindExec}}, func(i int) bool { return true }},
		{"sandbox and kind", Query{Sandbox: "sb-2", Kinds: []Kind{KindExec}}, func(i int) bool { return i%3 == 2 && i%5 != 0 }},
		{"time range", Query{Kinds: []Kind{KindExec, KindEgress}, Since: clock.Add(50 * time.Minute), Until: clock.Add(60 * time.Minute)}, func(i int) bool { return i >= 50 && i < 60 }},
		{"time and sandbox", Query{Sandbox: "sb-0", Since: clock.Add(250 * time.Minute)}, func(i int) bool { return i >= 250 && i%3 == 0 }},
		{"small pages", Query{Sandbox: "sb-0", Limit: 7}, func(i int) bool { return i%3 == 0 }},
		{"small scans", Query{Key: "k1", MaxScan: 4096}, func(i int) bool { return i%2 == 1 && i != 100 }},
		{"nothing", Query{Sandbox: "sb-9"}, func(i int) bool { return false }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, pages := queryAll(t, l, tc.q)
			var want []string
			for i := 299; i >= 0; i-- {
				if tc.want(i) {
					want = append(want, fmt.Sprint(i))
				}
			}
			var codes []string
			for _, ev := range got {
				if ev.Kind == KindCheckpoint {
					t.Fatalf("a checkpoint matched %+v", tc.q)
				}
				if len(ev.Code) > 100 {
					ev.Code = "200"
				}
				codes = append(codes, ev.Code)
			}
			if !slices.Equal(codes, want) {
				t.Fatalf("got %d events %v…, want %d %v…", len(codes), head(codes), len(want), head(want))
			}
			if tc.q.Limit == 7 && pages < len(want)/7 {
				t.Fatalf("%d pages for %d events of 7", pages, len(want))
			}
			if tc.q.MaxScan == 4096 && pages < 10 {
				t.Fatalf("a 4 KiB scan bound read the log in %d pages", pages)
			}
		})
	}
	// A page stops at its limit and says where to go on.
	p, err := l.Query(ctx, Query{Kinds: []Kind{KindExec}, Limit: 3})
	if err != nil || len(p.Events) != 3 || p.Next == "" || p.Scanned == 0 {
		t.Fatalf("limited page: %d events, next %q, %v", len(p.Events), p.Next, err)
	}
	// Cursors that are not at a line of the log are refused.
	for _, c := range []string{"x", "-1", "0", "1", "99999999999", "12"} {
		if _, err := l.Query(ctx, Query{Before: c}); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("cursor %q: %v", c, err)
		}
	}
}

func head(s []string) []string { return s[:min(len(s), 8)] }

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestQueryReaderEdges reads logs with a torn tail and a line that is not
// an event.
func TestQueryReaderEdges(t *testing.T) {
	log := `{"seq":1,"kind":"exec","sandbox":"a"}` + "\n" + `not json` + "\n" + `{"seq":3,"kind":"exec","sandbox":"b"}` + "\n" + `{"seq":4,"ki`
	r := strings.NewReader(log)
	p, err := QueryReader(context.Background(), r, int64(len(log)), Query{})
	if err != nil || len(p.Events) != 4 || string(p.Events[0]) != `{"seq":4,"ki` || string(p.Events[2]) != "not json" || p.Next != "" {
		t.Fatalf("no filter: %q %v", p.Events, err)
	}
	p, err = QueryReader(context.Background(), r, int64(len(log)), Query{Sandbox: "b"})
	if err != nil || len(p.Events) != 1 {
		t.Fatalf("sandbox b: %q %v", p.Events, err)
	}
	p, err = QueryReader(context.Background(), r, 0, Query{})
	if err != nil || len(p.Events) != 0 || p.Next != "" {
		t.Fatalf("empty: %q %v", p.Events, err)
	}
	// A line longer than any event's is refused, not read whole.
	huge := strings.NewReader(`{"seq":1}` + "\n" + strings.Repeat("x", maxLineBytes+backChunk) + "\n")
	if _, err := QueryReader(context.Background(), huge, huge.Size(), Query{}); err == nil || !strings.Contains(err.Error(), "not an audit log") {
		t.Fatalf("a huge line: %v", err)
	}
	// Pages are bounded in bytes as well as in events.
	var big strings.Builder
	for i := range 40 {
		fmt.Fprintf(&big, `{"seq":%d,"kind":"exec","code":"%s"}`+"\n", i+1, strings.Repeat("y", 1<<20))
	}
	p, err = QueryReader(context.Background(), strings.NewReader(big.String()), int64(big.Len()), Query{Limit: 1000})
	if err != nil || len(p.Events) >= 40 || len(p.Events) < 4 || p.Next == "" {
		t.Fatalf("a page of 40 MiB of events: %d events, next %q, %v", len(p.Events), p.Next, err)
	}
}

// TestVerifyLive finds an edit of a line while the log is open, and
// counts lines not yet sealed.
func TestVerifyLive(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	l, err := Open(path, Options{Key: newKey(t), HeadPath: filepath.Join(dir, "head"), CheckpointEvery: 1000, CheckpointInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 5 {
		if err := l.Append(context.Background(), Event{Kind: KindExec, Sandbox: "sb", Code: fmt.Sprint("print(", i, ")")}); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := l.VerifyLive()
	if err != nil || !rep.OK() || rep.Lines != 6 || rep.Unsealed != 5 {
		t.Fatalf("intact log: %+v %v", rep, err)
	}
	b := mustRead(t, path)
	i := strings.Index(string(b), "print(3)")
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("print(9)"), int64(i)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	rep, err = l.VerifyLive()
	if err != nil || rep.OK() || rep.Problems[0].Line != 5 {
		t.Fatalf("edited line 5: %+v %v", rep, err)
	}
}
