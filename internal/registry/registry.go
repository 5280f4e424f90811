// Package registry starts the reference container registry (Debian's
// docker-registry, github.com/docker/distribution) on a loopback port,
// with its storage in a directory of the caller's: the image tests'
// registry, and the one `airlock bench` pulls from for its image rows.
package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Bin is where Debian's docker-registry package installs the registry.
const Bin = "/usr/bin/docker-registry"

// Fix says how to get the registry.
const Fix = "apt-get install docker-registry (the reference registry, " + Bin + ")"

// Registry is one running registry.
type Registry struct {
	// Host is its "127.0.0.1:PORT", plain HTTP.
	Host string
	// User and Password, when set, are the only credentials it takes
	// (RunAuth).
	User, Password string
	cmd            *exec.Cmd
	log            *syncBuffer
	done           chan struct{}
}

// Run starts the registry with its storage and config in dir, and waits
// until it answers.
func Run(ctx context.Context, dir string) (*Registry, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	return RunOn(ctx, dir, "127.0.0.1:"+strconv.Itoa(port))
}

// RunOn starts the registry as Run does, listening on host (a loopback
// "ADDRESS:PORT"): a test restarts one on the same address and storage.
func RunOn(ctx context.Context, dir, host string) (*Registry, error) {
	return run(ctx, dir, host, "", "")
}

// RunAuth starts the registry as Run does, answering only requests with
// user's password (HTTP basic authentication, from an htpasswd file in
// dir), as a private registry does.
func RunAuth(ctx context.Context, dir, user, password string) (*Registry, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	return run(ctx, dir, "127.0.0.1:"+strconv.Itoa(port), user, password)
}

func run(ctx context.Context, dir, host, user, password string) (*Registry, error) {
	if _, err := os.Stat(Bin); err != nil {
		return nil, fmt.Errorf("the registry is not installed: %w", err)
	}
	auth := ""
	if user != "" {
		hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
		if err != nil {
			return nil, err
		}
		htpasswd := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(htpasswd, []byte(user+":"+string(hash)+"\n"), 0o600); err != nil {
			return nil, err
		}
		auth = fmt.Sprintf("auth:\n  htpasswd:\n    realm: airlock-test\n    path: %s\n", htpasswd)
	}
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
%s`, filepath.Join(dir, "data"), host, auth)
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	r := &Registry{Host: host, User: user, Password: password, log: &syncBuffer{}, done: make(chan struct{})}
	r.cmd = exec.Command(Bin, "serve", cfgPath)
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	if err := r.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the registry: %w", err)
	}
	go func() { _ = r.cmd.Wait(); close(r.done) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get("http://" + host + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || user != "" && resp.StatusCode == http.StatusUnauthorized {
				return r, nil
			}
		}
		select {
		case <-r.done:
			return nil, fmt.Errorf("the registry exited: %s", r.Log())
		case <-ctx.Done():
			r.Stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.Stop()
			return nil, errors.New("the registry does not answer on " + host + ": " + r.Log())
		}
	}
}

// Stop kills the registry and waits for it.
func (r *Registry) Stop() {
	_ = r.cmd.Process.Kill()
	<-r.done
}

// Log is what the registry printed.
func (r *Registry) Log() string { return r.log.String() }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() > 1<<20 {
		return len(p), nil
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
