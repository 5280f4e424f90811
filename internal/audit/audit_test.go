package audit

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
	"syscall"
	"testing"
	"time"
)

func newKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// writeLog makes a closed log of n exec events and returns its lines.
func writeLog(t *testing.T, path string, key ed25519.PrivateKey, n int) []string {
	t.Helper()
	l, err := Open(path, Options{Key: key, HeadPath: path + ".head", CheckpointEvery: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := l.Append(context.Background(), Event{Kind: KindExec, Key: "k1", Sandbox: "sb", Argv: []string{"echo", strconv.Itoa(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return readLines(t, path)
}

func readLines(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.SplitAfter(string(b), "\n")[:strings.Count(string(b), "\n")]
}

func verifyFile(t *testing.T, path string, opts VerifyOptions) Report {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := Verify(f, opts)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestAppendVerify(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	key := newKey(t)
	lines := writeLog(t, path, key, 10)
	// open checkpoint + 10 events + close checkpoint
	if len(lines) != 12 {
		t.Fatalf("got %d lines, want 12", len(lines))
	}
	head, err := ReadHead(path + ".head")
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyHead(head, key.Public().(ed25519.PublicKey)); err != nil {
		t.Fatal(err)
	}
	rep := verifyFile(t, path, VerifyOptions{PublicKey: key.Public().(ed25519.PublicKey), Head: &head})
	if !rep.OK() || rep.Lines != 12 || rep.Checkpoints != 2 || rep.Unsealed != 0 {
		t.Fatalf("report %+v", rep)
	}
	// Reopening continues the chain.
	l, err := Open(path, Options{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Egress(context.Background(), "k1", "sb", "example.com", "93.184.216.34", "allow example.com", "allowlisted", true); err != nil {
		t.Fatal(err)
	}
	l.Close()
	rep = verifyFile(t, path, VerifyOptions{PublicKey: key.Public().(ed25519.PublicKey)})
	if !rep.OK() || rep.Lines != 15 {
		t.Fatalf("after reopen: %+v", rep)
	}
	// Another key does not verify it.
	rep = verifyFile(t, path, VerifyOptions{PublicKey: newKey(t).Public().(ed25519.PublicKey)})
	if rep.OK() || rep.Problems[0].Line != 1 {
		t.Fatalf("foreign key: %+v", rep)
	}
}

func TestTamperFoundAtLine(t *testing.T) {
	key := newKey(t)
	pub := key.Public().(ed25519.PublicKey)
	tests := []struct {
		name   string
		tamper func(lines []string) []string
		// want lists the problem lines expected (1-based).
		want []int
		torn bool
	}{
		{name: "flip byte in body", want: []int{5}, tamper: func(l []string) []string {
			l[4] = strings.Replace(l[4], `"echo"`, `"echO"`, 1)
			return l
		}},
		{name: "flip byte in prev field", want: []int{6}, tamper: func(l []string) []string {
			i := strings.Index(l[5], `"prev":"`) + 8
			b := []byte(l[5])
			b[i] ^= 1
			l[5] = string(b)
			return l
		}},
		{name: "break json", want: []int{3}, tamper: func(l []string) []string {
			l[2] = strings.Replace(l[2], `{`, `[`, 1)
			return l
		}},
		{name: "delete a line", want: []int{7}, tamper: func(l []string) []string {
			return append(l[:6:6], l[7:]...)
		}},
		{name: "reorder two lines", want: []int{4, 5}, tamper: func(l []string) []string {
			l[3], l[4] = l[4], l[3]
			return l
		}},
		{name: "truncate mid-line", want: []int{9}, torn: true, tamper: func(l []string) []string {
			l = l[:9]
			l[8] = l[8][:len(l[8])/2]
			return l
		}},
		{name: "truncate whole lines past checkpoint", want: []int{9}, tamper: func(l []string) []string {
			return l[:8]
		}},
		{name: "edit the final checkpoint", want: []int{12}, tamper: func(l []string) []string {
			l[11] = strings.Replace(l[11], `"close"`, `"clos_"`, 1)
			return l
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.log")
			lines := writeLog(t, path, key, 10)
			head, err := ReadHead(path + ".head")
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(strings.Join(tt.tamper(lines), "")), 0o600); err != nil {
				t.Fatal(err)
			}
			rep := verifyFile(t, path, VerifyOptions{PublicKey: pub, Head: &head})
			var got []int
			for _, p := range rep.Problems {
				got = append(got, p.Line)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) || rep.Torn != tt.torn {
				t.Fatalf("problems at %v (torn %v), want %v (torn %v): %v", got, rep.Torn, tt.want, tt.torn, rep.Problems)
			}
		})
	}
}

func TestRewriteWithFreshChain(t *testing.T) {
	dir := t.TempDir()
	key := newKey(t)
	orig := filepath.Join(dir, "audit.log")
	writeLog(t, orig, key, 5)
	// An attacker without the key writes a whole new, self-consistent log.
	forged := filepath.Join(dir, "forged.log")
	writeLog(t, forged, newKey(t), 5)
	if err := os.Rename(forged, orig); err != nil {
		t.Fatal(err)
	}
	rep := verifyFile(t, orig, VerifyOptions{PublicKey: key.Public().(ed25519.PublicKey)})
	if rep.OK() || rep.Problems[0].Line != 1 {
		t.Fatalf("rewrite not found at line 1: %+v", rep)
	}
	// Stripping the checkpoints does not help either.
	lines := readLines(t, orig)
	if err := os.WriteFile(orig, []byte(strings.Join(lines[1:len(lines)-1], "")), 0o600); err != nil {
		t.Fatal(err)
	}
	rep = verifyFile(t, orig, VerifyOptions{PublicKey: key.Public().(ed25519.PublicKey)})
	if rep.OK() || rep.Problems[0].Line != 1 {
		t.Fatalf("stripped rewrite not found at line 1: %+v", rep)
	}
}

func TestTornTailRecovered(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	key := newKey(t)
	writeLog(t, path, key, 3)
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"seq":6,"kind":"exec","argv":["half`)
	f.Close()
	if rep := verifyFile(t, path, VerifyOptions{}); !rep.OnlyTorn() {
		t.Fatalf("torn tail not reported: %+v", rep)
	}
	l, err := Open(path, Options{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	rep := verifyFile(t, path, VerifyOptions{PublicKey: key.Public().(ed25519.PublicKey)})
	if !rep.OK() || len(rep.Recovered) != 1 {
		t.Fatalf("after reopen: %+v", rep)
	}
	if !strings.Contains(readLines(t, path)[rep.Recovered[0]-1], "torn final line of 36 bytes") {
		t.Fatal("recover event does not say what was cut")
	}
}

func TestKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.key")
	k1, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("key mode %v", st.Mode().Perm())
	}
	k2, err := LoadOrCreateKey(path)
	if err != nil || !k1.Equal(k2) {
		t.Fatalf("reload: %v", err)
	}
	pub, err := ReadPublicKey(path + ".pub")
	if err != nil || !pub.Equal(k1.Public()) {
		t.Fatalf("public key: %v", err)
	}
	os.Chmod(path, 0o644)
	if _, err := LoadOrCreateKey(path); err == nil {
		t.Fatal("a world-readable key was accepted")
	}
}

func TestConcurrentAppends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	key := newKey(t)
	l, err := Open(path, Options{Key: key, CheckpointEvery: 50})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				if err := l.Append(context.Background(), Event{Kind: KindFileWrite, Key: "k", Path: fmt.Sprintf("/workspace/%d-%d", g, i)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	l.Close()
	if err := l.Append(context.Background(), Event{Kind: KindExec}); err == nil {
		t.Fatal("append after close succeeded")
	}
	rep := verifyFile(t, path, VerifyOptions{PublicKey: key.Public().(ed25519.PublicKey)})
	if !rep.OK() || rep.Checkpoints < 800/50 {
		t.Fatalf("report %+v", rep)
	}
}

// TestKillWriter kills a process appending as fast as it can with
// SIGKILL, then verifies: at most a torn final line may be reported, and
// every event the writer was told is durable is in the file.
func TestKillWriter(t *testing.T) {
	if os.Getenv("AUDIT_TEST_WRITER") != "" {
		writerMain()
		return
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	key := newKey(t)
	if err := os.WriteFile(filepath.Join(dir, "key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillWriter$")
		cmd.Env = append(os.Environ(), "AUDIT_TEST_WRITER="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		var acked int
		deadline := time.Now().Add(300 * time.Millisecond)
		for sc.Scan() {
			if n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "acked ")); err == nil {
				acked = n
			}
			if time.Now().After(deadline) && acked > 100 {
				break
			}
		}
		cmd.Process.Signal(syscall.SIGKILL)
		go func() {
			for sc.Scan() { // drain acks written before the kill landed
				if n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "acked ")); err == nil {
					acked = n
				}
			}
		}()
		cmd.Wait()
		rep := verifyFile(t, path, VerifyOptions{PublicKey: key.Public().(ed25519.PublicKey)})
		if !rep.OK() && !rep.OnlyTorn() {
			t.Fatalf("round %d: after kill -9: %v", round, rep.Problems)
		}
		b, _ := os.ReadFile(path)
		if got := bytes.Count(b, []byte(`"kind":"exec"`)); got < acked {
			t.Fatalf("round %d: %d exec events acknowledged, %d in the file", round, acked, got)
		}
		t.Logf("round %d: %d lines, %d acknowledged events, torn=%v, unsealed=%d", round, rep.Lines, acked, rep.Torn, rep.Unsealed)
	}
}

// writerMain appends from 8 goroutines until killed, printing the number
// of exec events acknowledged durable.
func writerMain() {
	dir := os.Getenv("AUDIT_TEST_WRITER")
	k, _ := os.ReadFile(filepath.Join(dir, "key"))
	l, err := Open(filepath.Join(dir, "audit.log"), Options{Key: ed25519.PrivateKey(k), CheckpointEvery: 200})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	// Count all exec events in the file so far: earlier rounds too.
	b, _ := os.ReadFile(filepath.Join(dir, "audit.log"))
	var mu sync.Mutex
	acked := bytes.Count(b, []byte(`"kind":"exec"`))
	for g := range 8 {
		go func() {
			for i := 0; ; i++ {
				err := l.Append(context.Background(), Event{Kind: KindExec, Key: "k", Sandbox: "sb", Code: strings.Repeat("x", 200*(g+1)), Language: "python"})
				if err != nil {
					fmt.Println("append:", err)
					os.Exit(1)
				}
				mu.Lock()
				acked++
				fmt.Printf("acked %d\n", acked)
				mu.Unlock()
			}
		}()
	}
	select {}
}

func TestRecent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	key := newKey(t)
	l, err := Open(path, Options{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 5 {
		l.Append(context.Background(), Event{Kind: KindFileDelete, Path: fmt.Sprint("/workspace/", i)})
	}
	got, err := l.Recent(2)
	if err != nil || len(got) != 2 || !strings.Contains(string(got[1]), `"/workspace/4"`) || !strings.Contains(string(got[0]), `"/workspace/3"`) {
		t.Fatalf("recent: %v %s", err, got)
	}
}
