package testrig

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/s3server"
)

// BuildS3 builds the S3 test server (s3server) into the cache unless it is
// there already, and returns its path. It takes the cache's lock, so that
// two builds never run at once.
func BuildS3(ctx context.Context, cache string, log io.Writer) (string, error) {
	if p, err := s3server.Find(cache); err == nil {
		return p, nil
	}
	lock, err := Acquire(ctx, filepath.Join(cache, "s3", ".lock"), "the S3 test server's build")
	if err != nil {
		return "", err
	}
	defer lock.Unlock()
	if p, err := s3server.Find(cache); err == nil {
		return p, nil
	}
	p := s3server.Path(cache)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", fmt.Errorf("build versitygw: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(p), "build-")
	if err != nil {
		return "", fmt.Errorf("build versitygw: %w", err)
	}
	defer os.RemoveAll(tmp)
	fmt.Fprintf(log, "building versitygw %s into %s (a few minutes the first time)\n", s3server.Version, p)
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "install", "-trimpath", "-ldflags=-s -w", s3server.Module+"@"+s3server.Version)
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "CGO_ENABLED=0", "GOFLAGS=")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build versitygw %s (go install %s@%s): %w", s3server.Version, s3server.Module, s3server.Version, err)
	}
	if err := os.Rename(filepath.Join(tmp, "versitygw"), p); err != nil {
		return "", fmt.Errorf("build versitygw: %w", err)
	}
	fmt.Fprintf(log, "versitygw %s built in %.0fs\n", s3server.Version, time.Since(start).Seconds())
	return p, nil
}

// StartS3 runs the S3 test server for test t, in t's temporary directory,
// and stops it when t ends. The caller has called testcap.Require(t, "s3").
func StartS3(t testing.TB) *s3server.Server {
	t.Helper()
	bin, err := s3server.Find(CacheDir())
	if err != nil {
		t.Fatalf("%v: %s", err, s3server.Fix)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := s3server.Run(ctx, bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("versitygw's log:\n%s", s.Log(20))
		}
		s.Stop()
	})
	return s
}
