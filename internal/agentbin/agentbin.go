// Package agentbin holds the in-sandbox agent binary that `make` embeds in
// airlock, and installs it where sandboxes can execute it.
//
// The agent is a separate small static program (cmd/airlock-agent) rather
// than airlock re-executing itself: it starts in about a millisecond and
// holds little memory, because it links none of the daemon's dependencies.
package agentbin

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

//go:embed all:bin
var embedded embed.FS

// Env names the variable that points at an agent binary to use instead of
// the embedded one (for development and tests).
const Env = "AIRLOCK_AGENT"

// Dir is where agents are installed: root-owned; others may execute the
// files (sandboxes start as their own uids) but not list or read them.
var Dir = "/run/airlock/agent"

var (
	once sync.Once
	path string
	perr error
)

// Path returns the path of an installed agent binary, installing it on
// first use.
func Path() (string, error) {
	once.Do(func() { path, perr = install() })
	return path, perr
}

// Sum returns the installed agent's SHA-256 (hex) as its file name carries
// it: the first 16 hex digits.
func Sum() (string, error) {
	p, err := Path()
	if err != nil {
		return "", err
	}
	sum := strings.TrimPrefix(filepath.Base(p), "airlock-agent-")
	if len(sum) != 16 {
		return "", fmt.Errorf("agent %s: no checksum in its name", p)
	}
	return sum, nil
}

func install() (string, error) {
	if p := os.Getenv(Env); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			return "", fmt.Errorf("read the agent named by %s: %w", Env, err)
		}
		sum := sha256.Sum256(b)
		return Install(b, hex.EncodeToString(sum[:]))
	}
	// The embedded agent is read only when it is not installed yet: copying
	// its megabytes on every start would cost more than the sandbox.
	f, err := embedded.Open("bin/airlock-agent")
	if errors.Is(err, fs.ErrNotExist) {
		return "", errors.New("this airlock was built without its agent: build it with `make` (or set " + Env + " to an airlock-agent binary)")
	}
	if err != nil {
		return "", err
	}
	fi, err := f.Stat()
	f.Close()
	if err != nil {
		return "", err
	}
	sum, err := embedded.ReadFile("bin/airlock-agent.sha256")
	if err == nil {
		if p := installed(strings.TrimSpace(string(sum)), fi.Size()); p != "" {
			return p, nil
		}
	}
	b, err := embedded.ReadFile("bin/airlock-agent")
	if err != nil {
		return "", err
	}
	if len(sum) == 0 {
		s := sha256.Sum256(b)
		sum = []byte(hex.EncodeToString(s[:]))
	}
	return Install(b, strings.TrimSpace(string(sum)))
}

func agentPath(sum string) string { return filepath.Join(Dir, "airlock-agent-"+sum[:16]) }

// installed returns the path of the agent with checksum sum if it is
// installed with the given size, else "".
func installed(sum string, size int64) string {
	if len(sum) < 16 {
		return ""
	}
	p := agentPath(sum)
	if fi, err := os.Stat(p); err == nil && fi.Size() == size {
		return p
	}
	return ""
}

// Install writes the agent b, whose SHA-256 is sum (hex), into Dir unless it
// is there already, and returns its path. Files are named by content, so
// agents of different airlock versions live side by side.
func Install(b []byte, sum string) (string, error) {
	if len(sum) < 16 {
		return "", errors.New("agent checksum too short")
	}
	if p := installed(sum, int64(len(b))); p != "" {
		return p, nil
	}
	dst := agentPath(sum)
	if err := os.MkdirAll(Dir, 0o711); err != nil {
		return "", fmt.Errorf("make the agent directory: %w", err)
	}
	if err := os.Chmod(Dir, 0o711); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(Dir, ".agent-*")
	if err != nil {
		return "", fmt.Errorf("install the agent: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return "", fmt.Errorf("install the agent: %w", err)
	}
	if err := tmp.Chmod(0o511); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", fmt.Errorf("install the agent: %w", err)
	}
	return dst, nil
}
