package testcap

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testrig/dockerd"
)

func TestDockerHost(t *testing.T) {
	// The engine of the environment, else the test rig's (which starts
	// one where dockerd is installed).
	if eng, err := dockerd.Ensure(context.Background(), io.Discard); err == nil {
		t.Cleanup(eng.Release)
		t.Setenv("DOCKER_HOST", eng.Host)
	} else {
		t.Logf("no Docker engine for the test: %v", err)
	}
	start := time.Now()
	r := Probe(context.Background(), "docker")
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the docker probe took %v, want under 30s", d)
	}
	if os.Getenv("DOCKER_HOST") == "" && !exists("/var/run/docker.sock") {
		if r.OK || !strings.Contains(r.Why, "does not exist") {
			t.Fatalf("docker = %+v without /var/run/docker.sock, want not OK saying it does not exist", r)
		}
		SkipOrFail(t, "docker", "no Docker engine here")
	}
	if !r.OK {
		SkipOrFail(t, "docker", "Docker engine does not answer: %s", r.Why)
	}
}

// fakeEngine serves /_ping on a unix socket the way a Docker engine does,
// and refuses everything else: an engine that answers but runs nothing.
func fakeEngine(t *testing.T, status int) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "docker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/_ping" {
			http.Error(w, `{"message":"this engine runs nothing"}`, http.StatusInternalServerError)
			return
		}
		w.Header().Set("Server", "Docker/99.0.0 (linux)")
		w.Header().Set("Api-Version", "1.99")
		w.WriteHeader(status)
		_, _ = w.Write([]byte("OK"))
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "unix://" + sock
}

func TestDockerProbe(t *testing.T) {
	noSock := "unix://" + filepath.Join(t.TempDir(), "none.sock")
	tests := []struct {
		name       string
		host       string
		wantOK     bool
		wantDetail string
		wantWhy    string
	}{
		{name: "engine answers but runs nothing", host: fakeEngine(t, http.StatusOK), wantWhy: "answers but cannot run a container: import an image"},
		{name: "engine errors", host: fakeEngine(t, http.StatusInternalServerError), wantWhy: "500"},
		{name: "no socket", host: noSock, wantWhy: "does not exist"},
		{name: "unsupported scheme", host: "ssh://me@example.com", wantWhy: "only unix:// and tcp://"},
		{name: "nothing on tcp", host: "tcp://127.0.0.1:1", wantWhy: "no Docker engine listens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("DOCKER_HOST", tt.host)
			r := Probe(context.Background(), "docker")
			if r.OK != tt.wantOK {
				t.Fatalf("docker = %+v, want OK %v", r, tt.wantOK)
			}
			if !strings.Contains(r.Detail, tt.wantDetail) || !strings.Contains(r.Why, tt.wantWhy) {
				t.Errorf("docker = %+v, want Detail containing %q and Why containing %q", r, tt.wantDetail, tt.wantWhy)
			}
			if !r.OK && r.Fix == "" {
				t.Errorf("no Fix for %+v", r)
			}
		})
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestTrueELF: the docker probe's one-file program runs and exits 0 here.
func TestTrueELF(t *testing.T) {
	elf := trueELF(runtime.GOARCH)
	if elf == nil {
		t.Skipf("no probe program for %s", runtime.GOARCH)
	}
	p := filepath.Join(t.TempDir(), "true")
	if err := os.WriteFile(p, elf, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(p).CombinedOutput(); err != nil {
		t.Fatalf("the probe's program: %v: %s", err, out)
	}
}
