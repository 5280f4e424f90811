// Package s3server finds and runs the S3-compatible server of the object
// store's tests and of `airlock bench`'s export rows: versitygw
// (github.com/versity/versitygw) with its POSIX backend, built from its Go
// module at a pinned version into $AIRLOCK_CACHE/s3 (Cache) once by the
// test rig (testrig.BuildS3):
//
//	go run ./internal/testrig/cmd/testrig s3-build   # what `make s3-rig` runs
//
// Find, which the bench and the testcap probe use, never builds. A test
// that needs the server calls testcap.Require(t, "s3") and then
// testrig.StartS3.
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
	"time"
)

// Version is the pinned version of github.com/versity/versitygw.
const Version = "v1.8.0"

// Module is the package go install builds.
const Module = "github.com/versity/versitygw/cmd/versitygw"

// Cache is the directory of heavy builds the server is cached in:
// $AIRLOCK_CACHE, else /var/cache/airlock (as testrig.CacheDir).
func Cache() string {
	if d := os.Getenv("AIRLOCK_CACHE"); d != "" {
		return d
	}
	return "/var/cache/airlock"
}

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
			return fmt.Errorf("versitygw ended at its start: %s", tail(s.log, 10))
		case <-ctx.Done():
			s.Stop()
			return fmt.Errorf("start versitygw: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("versitygw did not answer within 30s: %s", tail(s.log, 10))
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
func (s *Server) Log(n int) string { return tail(s.log, n) }

// MakeBucket creates a bucket: with the POSIX backend a bucket is a
// directory of Dir, which the server lists as one.
func (s *Server) MakeBucket(name string) error {
	if name == "" || strings.ContainsAny(name, "/\x00") || strings.HasPrefix(name, ".") {
		return errors.New("make bucket " + name + ": not a bucket name")
	}
	return os.Mkdir(filepath.Join(s.Dir, name), 0o755)
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

// tailBytes bounds how much of the log tail reads.
const tailBytes = 64 << 10

// tail returns the last n non-empty lines of the log at path, for an error
// message; a note when it cannot be read.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	off := max(st.Size()-tailBytes, 0)
	b, err := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	if err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	var kept []string
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if strings.TrimSpace(l) != "" {
			kept = append(kept, l)
		}
	}
	if len(kept) == 0 {
		return "(the log is empty)"
	}
	return strings.Join(kept[max(len(kept)-n, 0):], "\n")
}
