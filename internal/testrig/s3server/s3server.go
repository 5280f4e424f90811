// Package s3server builds, finds and runs the S3-compatible server the
// tests of the object store use: versitygw (github.com/versity/versitygw)
// with its POSIX backend, built from its Go module at a pinned version
// into $AIRLOCK_CACHE/s3 (testrig.CacheDir) once:
//
//	go run ./internal/testrig/cmd/testrig s3-build   # what `make s3-rig` runs
//
// Find, which the tests and the hostcap probe use, never builds. A test
// that needs the server calls testcap.Require(t, "s3") and then Start.
package s3server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testrig"
)

// Version is the pinned version of github.com/versity/versitygw.
const Version = "v1.8.0"

// module is the package go install builds.
const module = "github.com/versity/versitygw/cmd/versitygw"

// Path is where the server of this version is cached under cache.
func Path(cache string) string {
	return filepath.Join(cache, "s3", "versitygw-"+Version, "versitygw")
}

// Fix says how to provide the server.
const Fix = "make s3-rig (builds versitygw " + Version + " from its Go module into $AIRLOCK_CACHE/s3, default /var/cache/airlock: a few minutes the first time; needs the Go module proxy)"

// Find returns the cached server's path, or an error saying how to build it.
func Find(cache string) (string, error) {
	p := Path(cache)
	fi, err := os.Stat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("versitygw %s is not built (%s is missing)", Version, p)
	}
	return p, nil
}

// Build builds the server into the cache unless it is there already, and
// returns its path. It takes the cache's lock, so that two builds never
// run at once.
func Build(ctx context.Context, cache string, log io.Writer) (string, error) {
	if p, err := Find(cache); err == nil {
		return p, nil
	}
	lock, err := testrig.Acquire(ctx, filepath.Join(cache, "s3", ".lock"), "the S3 test server's build")
	if err != nil {
		return "", err
	}
	defer lock.Unlock()
	if p, err := Find(cache); err == nil {
		return p, nil
	}
	p := Path(cache)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", fmt.Errorf("build versitygw: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(p), "build-")
	if err != nil {
		return "", fmt.Errorf("build versitygw: %w", err)
	}
	defer os.RemoveAll(tmp)
	fmt.Fprintf(log, "building versitygw %s into %s (a few minutes the first time)\n", Version, p)
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "install", "-trimpath", "-ldflags=-s -w", module+"@"+Version)
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "CGO_ENABLED=0", "GOFLAGS=")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build versitygw %s (go install %s@%s): %w", Version, module, Version, err)
	}
	if err := os.Rename(filepath.Join(tmp, "versitygw"), p); err != nil {
		return "", fmt.Errorf("build versitygw: %w", err)
	}
	fmt.Fprintf(log, "versitygw %s built in %.0fs\n", Version, time.Since(start).Seconds())
	return p, nil
}

// Server is a running versitygw on a loopback port, keeping its buckets in
// a directory of its own.
type Server struct {
	// Endpoint is its URL (http://127.0.0.1:PORT).
	Endpoint string
	// AccessKey and SecretKey are its root account's credentials.
	AccessKey, SecretKey string
	// Region is the region it signs for.
	Region string
	// Dir holds its buckets, one directory each.
	Dir string

	bin  string
	port int
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

// Run starts the server at bin keeping its buckets in dir (created), with
// new random credentials, and waits until it answers.
func Run(ctx context.Context, bin, dir string) (*Server, error) {
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
		return nil, fmt.Errorf("start versitygw: %w", err)
	}
	s := &Server{
		AccessKey: "test" + randHex(8), SecretKey: randHex(20), Region: "us-east-1",
		Dir: filepath.Join(dir, "data"), bin: bin, log: filepath.Join(dir, "versitygw.log"),
	}
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("start versitygw: %w", err)
	}
	s.port = port
	s.Endpoint = "http://127.0.0.1:" + strconv.Itoa(port)
	return s, s.start(ctx)
}

func (s *Server) start(ctx context.Context) error {
	logf, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("start versitygw: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(s.bin, "--port", "127.0.0.1:"+strconv.Itoa(s.port), "--region", s.Region, "posix", s.Dir)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+s.AccessKey, "ROOT_SECRET_ACCESS_KEY="+s.SecretKey)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start versitygw: %w", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.port), time.Second); err == nil {
			c.Close()
			// Any HTTP answer (an anonymous request is refused) says it serves.
			if resp, err := http.Get(s.Endpoint + "/"); err == nil {
				resp.Body.Close()
				return nil
			}
		}
		select {
		case <-s.done:
			return fmt.Errorf("versitygw ended at its start: %s", testrig.Tail(s.log, 10))
		case <-ctx.Done():
			s.Stop()
			return fmt.Errorf("start versitygw: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("versitygw did not answer within 30s: %s", testrig.Tail(s.log, 10))
		}
	}
}

// Stop ends the server (its buckets stay in Dir). It may be called more
// than once.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
	s.cmd = nil
}

// Restart starts a stopped server again on the same port, with the same
// credentials and buckets.
func (s *Server) Restart(ctx context.Context) error {
	s.Stop()
	return s.start(ctx)
}

// Log returns the last lines of the server's log.
func (s *Server) Log(n int) string { return testrig.Tail(s.log, n) }

// MakeBucket creates a bucket: with the POSIX backend a bucket is a
// directory of Dir, which the server lists as one.
func (s *Server) MakeBucket(name string) error {
	if name == "" || strings.ContainsAny(name, "/\x00") || strings.HasPrefix(name, ".") {
		return errors.New("make bucket " + name + ": not a bucket name")
	}
	return os.Mkdir(filepath.Join(s.Dir, name), 0o755)
}

// Start runs a server for test t, in t's temporary directory, and stops it
// when t ends. The caller has called testcap.Require(t, "s3").
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := Find(testrig.CacheDir())
	if err != nil {
		t.Fatalf("%v: %s", err, Fix)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Run(ctx, bin, t.TempDir())
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

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
