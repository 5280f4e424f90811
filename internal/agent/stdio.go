package agent

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// StdioArg, as the agent's first argument, makes it take its Config and
// serve the host on its standard input and output instead of descriptors
// FDConfig and FDConn: the way in when a container runtime (runsc) starts
// the agent and passes it nothing but stdio. Standard error stays the
// agent's log.
//
// The stream begins with the Config, framed by WriteConfig, and HTTP/2
// follows on the same stream.
const StdioArg = "--stdio"

// RelayArg, as the agent binary's first argument followed by a socket path,
// makes it a relay instead of an agent: it connects to the agent listening
// on that unix socket (ContainedConfig.Listen) and copies its standard input
// to the socket and the socket to its standard output, until either ends.
// A host reaches a running agent again this way, through a command it runs
// in the sandbox (`docker exec`), after its first session ended.
const RelayArg = "--relay"

// OwnNamespacesArg, as the agent's first argument, makes it move into a
// new network namespace with only loopback (up) and a cgroup namespace of
// its own before it does anything else, then go on with the arguments
// that follow: for a runtime whose sandboxes always have a network the
// workload must not reach, and share the host's cgroup namespace (a
// Kubernetes Pod's, on a cgroup v1 node). The agent's own stream is
// standard input and output, so it needs no network; egress goes through
// its tunnel as everywhere; the cgroup namespace roots the hierarchies it
// mounts at the container's own group (ContainedConfig.CgroupV1).
const OwnNamespacesArg = "--own-namespaces"

// WriteConfig writes cfg to w as the first message of a stdio stream: its
// length as 4 bytes, big-endian, then its JSON.
func WriteConfig(w io.Writer, cfg *Config) error {
	b, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encode the agent config: %w", err)
	}
	if len(b) > MaxMessage {
		return fmt.Errorf("encode the agent config: %d bytes is more than %d", len(b), MaxMessage)
	}
	msg := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(msg, uint32(len(b)))
	copy(msg[4:], b)
	if _, err := w.Write(msg); err != nil {
		return fmt.Errorf("send the agent config: %w", err)
	}
	return nil
}

// ReadConfig reads what WriteConfig wrote, and not a byte more: what
// follows belongs to HTTP/2.
func ReadConfig(r io.Reader) (*Config, error) {
	cfg, _, err := ReadConfigJSON(r)
	return cfg, err
}

// ReadConfigJSON is ReadConfig that also returns the config's JSON as it
// was sent.
func ReadConfigJSON(r io.Reader) (*Config, []byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, nil, fmt.Errorf("read the config's length: %w", err)
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > MaxMessage {
		return nil, nil, fmt.Errorf("read the config: %d bytes is more than %d", size, MaxMessage)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, nil, fmt.Errorf("read the config: %w", err)
	}
	var cfg Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, nil, fmt.Errorf("decode the config: %w", err)
	}
	return &cfg, b, nil
}

// PipeConn joins the read end of one pipe and the write end of another
// into one connection, such as a container's stdin and stdout. Deadlines
// work when the files are pollable (os.Pipe's are; make an inherited
// descriptor non-blocking before os.NewFile).
func PipeConn(r, w *os.File) net.Conn { return &pipeConn{r: r, w: w} }

type pipeConn struct {
	r, w      *os.File
	closeOnce sync.Once
	closeErr  error
}

func (c *pipeConn) Read(b []byte) (int, error)  { return c.r.Read(b) }
func (c *pipeConn) Write(b []byte) (int, error) { return c.w.Write(b) }

// Close closes both ends; the other side reads EOF.
func (c *pipeConn) Close() error {
	c.closeOnce.Do(func() { c.closeErr = errors.Join(c.w.Close(), c.r.Close()) })
	return c.closeErr
}

func (c *pipeConn) LocalAddr() net.Addr  { return pipeAddr{} }
func (c *pipeConn) RemoteAddr() net.Addr { return pipeAddr{} }

func (c *pipeConn) SetDeadline(t time.Time) error {
	return errors.Join(c.r.SetReadDeadline(t), c.w.SetWriteDeadline(t))
}
func (c *pipeConn) SetReadDeadline(t time.Time) error  { return c.r.SetReadDeadline(t) }
func (c *pipeConn) SetWriteDeadline(t time.Time) error { return c.w.SetWriteDeadline(t) }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "stdio" }
