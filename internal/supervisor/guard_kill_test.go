package supervisor

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// TestKillDaemonDuringExecs runs a supervisor with an audit log in a child
// process under heavy exec traffic, kills it with SIGKILL, and verifies
// the log: only a torn final line may be reported, and every exec that
// returned to its caller is in it.
func TestKillDaemonDuringExecs(t *testing.T) {
	if dir := os.Getenv("AIRLOCK_GUARD_CHILD"); dir != "" {
		guardChild(dir)
		return
	}
	dir := t.TempDir()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	if err := os.WriteFile(filepath.Join(dir, "key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillDaemonDuringExecs$")
	cmd.Env = append(os.Environ(), "AIRLOCK_GUARD_CHILD="+dir)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acked atomic.Int64
	sc := bufio.NewScanner(out)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for sc.Scan() {
			if n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "done ")); err == nil {
				acked.Store(int64(n))
			}
		}
	}()
	for start := time.Now(); acked.Load() < 300 && time.Since(start) < 20*time.Second; {
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	wg.Wait()
	if acked.Load() < 300 {
		t.Fatalf("the child made only %d execs", acked.Load())
	}
	f, err := os.Open(filepath.Join(dir, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := audit.Verify(f, audit.VerifyOptions{PublicKey: ed25519.PrivateKey(key).Public().(ed25519.PublicKey)})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() && !rep.OnlyTorn() {
		t.Fatalf("after kill -9: %v", rep.Problems)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "audit.log"))
	if got := int64(bytes.Count(b, []byte(`"kind":"exec"`))); got < acked.Load() {
		t.Fatalf("%d execs returned, %d in the audit log", acked.Load(), got)
	}
	t.Logf("%d lines, %d execs returned before the kill, torn=%v", rep.Lines, acked.Load(), rep.Torn)
}

// guardChild is the daemon TestKillDaemonDuringExecs kills: 8 callers
// exec in a loop; it prints how many execs have returned.
func guardChild(dir string) {
	key, _ := os.ReadFile(filepath.Join(dir, "key"))
	al, err := audit.Open(filepath.Join(dir, "audit.log"), audit.Options{Key: ed25519.PrivateKey(key), CheckpointEvery: 100})
	if err != nil {
		fmt.Println("open audit:", err)
		os.Exit(1)
	}
	st, err := store.Open(dir, 0)
	if err != nil {
		fmt.Println("open store:", err)
		os.Exit(1)
	}
	sup, err := New(Options{Store: st, Drivers: map[string]sandbox.Driver{"native": &fake.Driver{}},
		MemAvailable: func() (int64, error) { return 64 << 30, nil }, Audit: al})
	if err != nil {
		fmt.Println("supervisor:", err)
		os.Exit(1)
	}
	c := Caller{KeyID: "key-load", Quota: store.Quota{MaxSandboxes: 16}}
	var mu sync.Mutex
	done := 0
	for g := range 8 {
		go func() {
			info, err := sup.Create(context.Background(), c, CreateRequest{})
			if err != nil {
				fmt.Println("create:", err)
				os.Exit(1)
			}
			for i := 0; ; i++ {
				if _, err := sup.Exec(context.Background(), c, info.ID, ExecRequest{Argv: []string{"echo", strconv.Itoa(g), strconv.Itoa(i)}}); err != nil {
					fmt.Println("exec:", err)
					os.Exit(1)
				}
				mu.Lock()
				done++
				fmt.Printf("done %d\n", done)
				mu.Unlock()
			}
		}()
	}
	select {}
}
