package supervisor

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// TestRecoverAudits: every sandbox a crash destroyed leaves a destroy
// event in the audit log when the next daemon recovers (the security
// review's F18 found none), with the key that owned it.
func TestRecoverAudits(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now().UTC()
	for _, r := range []store.Sandbox{
		{ID: "sb-run", Owner: "key-a", State: store.StateRunning, Created: now, Driver: "native"},
		{ID: "sb-pool", State: store.StatePooled, Created: now, Driver: "native"},
		{ID: "sb-gone", Owner: "key-a", State: store.StateDestroyed, Created: now, Ended: now, EndReason: "deleted", Driver: "native"},
	} {
		if err := st.PutSandbox(r); err != nil {
			t.Fatal(err)
		}
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	logPath := filepath.Join(dir, "audit.log")
	al, err := audit.Open(logPath, audit.Options{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	sup, err := New(Options{Store: st, Drivers: map[string]sandbox.Driver{"native": &fake.Driver{}}, Audit: al,
		MemAvailable: func() (int64, error) { return 64 << 30, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sup.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	_ = sup.Close(context.Background())
	al.Close()
	b, _ := os.ReadFile(logPath)
	destroyed := map[string]audit.Event{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var ev audit.Event
		_ = json.Unmarshal([]byte(line), &ev)
		if ev.Kind == audit.KindDestroy {
			destroyed[ev.Sandbox] = ev
		}
	}
	for _, id := range []string{"sb-run", "sb-pool"} {
		ev, ok := destroyed[id]
		if !ok || !strings.HasPrefix(ev.Reason, "lost") {
			t.Errorf("no destroy event for %s, lost with the previous daemon: %s", id, b)
		}
	}
	if destroyed["sb-run"].Key != "key-a" {
		t.Errorf("the lost sandbox's event names key %q, want its owner", destroyed["sb-run"].Key)
	}
	if _, ok := destroyed["sb-gone"]; ok {
		t.Errorf("a sandbox destroyed before the crash got a second event")
	}
}
