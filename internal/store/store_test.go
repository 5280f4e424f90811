package store

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// lockHolderEnv makes the test binary hold the database of a directory
// until it is killed (see TestOpenLockedFailsFast).
const lockHolderEnv = "AIRLOCK_STORE_TEST_HOLD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(lockHolderEnv); dir != "" {
		s, err := Open(dir, 0)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer s.Close()
		fmt.Println("holding")
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func open(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestSandboxRecords(t *testing.T) {
	s := open(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	recs := []Sandbox{
		{ID: "a", Owner: "key-1", Template: "default", Driver: "native", State: StateRunning, Created: now, ExpiresAt: now.Add(time.Minute), IdleTimeout: time.Second},
		{ID: "b", Template: "py", Driver: "native", State: StatePooled, Created: now},
		{ID: "c", Owner: "key-2", Driver: "native", State: StateDestroyed, Created: now, Ended: now.Add(-2 * time.Hour), EndReason: "deleted"},
		{ID: "d", Owner: "key-2", Driver: "native", State: StateCreating, Created: now, Spec: sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 64 << 20}}},
	}
	for _, r := range recs {
		if err := s.PutSandbox(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutSandbox(Sandbox{ID: "../x"}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("bad id stored: %v", err)
	}
	got, err := s.GetSandbox("d")
	if err != nil || got.Spec.Limits.MemoryBytes != 64<<20 || got.State != StateCreating {
		t.Fatalf("GetSandbox(d) = %+v, %v", got, err)
	}
	if _, err := s.GetSandbox("zz"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("missing sandbox: %v", err)
	}
	mine, _ := s.Sandboxes(func(sb *Sandbox) bool { return sb.Owner == "key-2" })
	if len(mine) != 2 || mine[0].ID != "c" || mine[1].ID != "d" {
		t.Fatalf("filter by owner: %+v", mine)
	}
	up, err := s.UpdateSandbox("a", func(sb *Sandbox) error { sb.ExpiresAt = sb.ExpiresAt.Add(time.Hour); return nil })
	if err != nil || !up.ExpiresAt.Equal(now.Add(time.Hour+time.Minute)) {
		t.Fatalf("update: %+v %v", up, err)
	}
	lost, err := s.MarkLost(now, "daemon restarted")
	if err != nil || len(lost) != 3 {
		t.Fatalf("MarkLost changed %d (%v), want 3 live ones", len(lost), err)
	}
	all, _ := s.Sandboxes(nil)
	for _, sb := range all {
		if sb.State.Live() {
			t.Errorf("%s still live after MarkLost: %s", sb.ID, sb.State)
		}
	}
	n, err := s.PruneEnded(now.Add(-time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("PruneEnded = %d, %v; want the one that ended 2h ago", n, err)
	}
	if _, err := s.GetSandbox("c"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatal("pruned record still there")
	}
}

// TestE2BKeys: a key in the E2B SDKs' form is a key like any other.
func TestE2BKeys(t *testing.T) {
	s := open(t)
	k, sec, err := s.NewKeyFormat(nil, "e2b", RoleAgent, Quota{}, RateLimits{}, time.Now(), FormatE2B)
	if err != nil {
		t.Fatal(err)
	}
	// What the SDKs check before they send a key.
	if !regexp.MustCompile(`^e2b_[0-9a-f]+$`).MatchString(string(sec)) || len(sec) != len("e2b_")+64 {
		t.Fatalf("an e2b key's secret is %q, not e2b_ and 64 hex digits", string(sec))
	}
	if got, err := s.KeyBySecret(string(sec)); err != nil || got.ID != k.ID {
		t.Fatalf("KeyBySecret = %+v, %v", got, err)
	}
	if _, _, err := s.NewKeyFormat(nil, "x", RoleAgent, Quota{}, RateLimits{}, time.Now(), "aws"); !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("an unknown key format was accepted: %v", err)
	}
}

func TestKeys(t *testing.T) {
	s := open(t)
	k, sec, err := s.NewKey("ci", RoleAgent, Quota{MaxSandboxes: 3}, RateLimits{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(sec), secretPrefix) || len(sec) < 40 {
		t.Fatalf("weak secret %q", string(sec))
	}
	if k.Hash == string(sec) || strings.Contains(k.Hash, string(sec)) || k.Hash != HashSecret(string(sec)) {
		t.Fatal("the key's stored hash is not the SHA-256 of its secret")
	}
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(s.db.Path()), FileName))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), string(sec)) {
		t.Fatal("the secret itself was written to the database")
	}
	got, err := s.KeyBySecret(string(sec))
	if err != nil || got.ID != k.ID || got.Quota.MaxSandboxes != 3 || got.Role != RoleAgent {
		t.Fatalf("KeyBySecret = %+v, %v", got, err)
	}
	if _, err := s.KeyBySecret(string(sec) + "x"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("wrong secret accepted: %v", err)
	}
	if _, _, err := s.NewKey("x", "root", Quota{}, RateLimits{}, time.Now()); !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("bad role accepted: %v", err)
	}
	if err := s.DeleteKey(k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.KeyBySecret(string(sec)); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatal("deleted key still works")
	}
	var b strings.Builder
	slog.New(slog.NewTextHandler(&b, nil)).Info("x", "secret", sec)
	if strings.Contains(b.String(), string(sec)) || fmt.Sprint(sec) != "REDACTED" {
		t.Fatalf("secret leaks into logs: %s", b.String())
	}
}

// TestOpenLockedFailsFast opens a database another process holds: Open
// must fail within its timeout with ErrLocked, not hang.
func TestOpenLockedFailsFast(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), lockHolderEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	buf := make([]byte, 16)
	if n, _ := out.Read(buf); !strings.Contains(string(buf[:n]), "holding") {
		t.Fatalf("holder did not start: %q", buf[:n])
	}
	start := time.Now()
	s, err := Open(dir, 300*time.Millisecond)
	if err == nil {
		s.Close()
		t.Fatal("opened a database another process holds")
	}
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "airlock serve") {
		t.Fatalf("error does not say what holds it: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Open took %v to fail", d)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	s, err = Open(dir, 0)
	if err != nil {
		t.Fatalf("open after the holder died: %v", err)
	}
	s.Close()
}

// TestActivity: when each sandbox was last used is kept apart from its
// record, and goes with it.
func TestActivity(t *testing.T) {
	s, err := Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now().UTC().Truncate(time.Microsecond)
	for _, id := range []string{"sb-a", "sb-b"} {
		if err := s.PutSandbox(Sandbox{ID: id, State: StateRunning, Created: now}); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Activity("sb-a"); !got.IsZero() {
		t.Errorf("activity before any: %v", got)
	}
	if err := s.SetActivity(map[string]time.Time{"sb-a": now, "sb-b": now.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if got := s.Activity("sb-b"); !got.Equal(now.Add(time.Second)) {
		t.Errorf("activity of sb-b: %v, want %v", got, now.Add(time.Second))
	}
	if err := s.DeleteSandbox("sb-b"); err != nil {
		t.Fatal(err)
	}
	if got := s.Activity("sb-b"); !got.IsZero() {
		t.Errorf("activity of a deleted sandbox: %v", got)
	}
	if _, err := s.UpdateSandbox("sb-a", func(r *Sandbox) error { r.State, r.Ended = StateDestroyed, now; return nil }); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PruneEnded(now.Add(time.Minute)); err != nil || n != 1 {
		t.Fatalf("prune: %d, %v", n, err)
	}
	if got := s.Activity("sb-a"); !got.IsZero() {
		t.Errorf("activity of a pruned sandbox: %v", got)
	}
}
