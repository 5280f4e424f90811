package api

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// heapWriter passes bytes on and samples this process's heap (the daemon
// runs in it) every few MiB.
type heapWriter struct {
	w          io.Writer
	n, next    int64
	peak, base uint64
}

func (h *heapWriter) Write(p []byte) (int, error) {
	h.n += int64(len(p))
	if h.n >= h.next {
		h.next = h.n + 4<<20
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		h.peak = max(h.peak, ms.HeapInuse)
	}
	return h.w.Write(p)
}

// TestArchiveDownloadStreams: an archive download streams each file from
// the sandbox to the client; the daemon does not hold a file in memory
// (the security review's F1 saw about twice the file's size per download).
func TestArchiveDownloadStreams(t *testing.T) {
	e := nativeEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := e.agent()
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{Limits: client.Limits{MemoryBytes: 256 << 20, DiskBytes: 200 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	const size = 128 << 20
	r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"sh", "-c", "head -c 134217728 /dev/urandom > /workspace/big.bin && sha256sum /workspace/big.bin"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.ExitCode != 0 {
		t.Fatalf("make the file: %+v %q", r, r.Stderr)
	}
	want, _, _ := strings.Cut(string(r.Stdout), " ")

	pr, pw := io.Pipe()
	type got struct {
		sum  string
		size int64
		err  error
	}
	res := make(chan got, 1)
	go func() {
		var g got
		tr := tar.NewReader(pr)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				g.err = err
				break
			}
			if h.Name == "big.bin" {
				hs := sha256.New()
				g.size, g.err = io.Copy(hs, tr)
				g.sum = hex.EncodeToString(hs.Sum(nil))
			}
		}
		_, _ = io.Copy(io.Discard, pr)
		res <- g
	}()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	hw := &heapWriter{w: pw, base: ms.HeapInuse}
	err = c.DownloadArchive(ctx, sb.ID, "/workspace", hw)
	pw.CloseWithError(err)
	g := <-res
	if err != nil || g.err != nil || g.size != size || g.sum != want {
		t.Fatalf("download: %v; tar: %v, %d bytes, sha256 %s, want %d bytes %s", err, g.err, g.size, g.sum, size, want)
	}
	grew := int64(hw.peak) - int64(hw.base)
	t.Logf("heap in use grew by %d MiB during the download of a %d MiB file", grew>>20, size>>20)
	if grew > 48<<20 {
		t.Fatalf("the daemon held %d MiB during the download of a %d MiB file: it buffers instead of streaming", grew>>20, size>>20)
	}
}

// TestFileErrorsClassified: a write past the sandbox's disk is 507 limit,
// and a write to its read-only root 403, not 500 internal.
func TestFileErrorsClassified(t *testing.T) {
	e := nativeEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := e.agent()
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{Limits: client.Limits{DiskBytes: 8 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	err = c.WriteFile(ctx, sb.ID, "/workspace/big", strings.NewReader(strings.Repeat("x", 12<<20)), 0o644)
	apiError(t, err, 507, "limit")
	for _, p := range []string{"/usr/bin/evil", "/etc/passwd"} {
		err = c.WriteFile(ctx, sb.ID, p, strings.NewReader("x"), 0o644)
		apiError(t, err, 403, "permission_denied")
	}
	err = c.Mkdir(ctx, sb.ID, "/usr/x", 0o755)
	apiError(t, err, 403, "permission_denied")
}
