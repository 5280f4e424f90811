package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Client is the host's side of the conversation with one agent. Everything
// the agent says is untrusted: messages are size-capped, and results are
// checked against the host's own counters by the driver.
type Client struct {
	cc        *http2.ClientConn
	hello     *lazyClient[HelloRequest, HelloResponse]
	exec      *lazyClient[ExecInput, ExecEvent]
	signal    *lazyClient[SignalRequest, Empty]
	readFile  *lazyClient[PathRequest, FileChunk]
	writeFile *lazyClient[FileChunk, Empty]
	readDir   *lazyClient[PathRequest, FileList]
	stat      *lazyClient[PathRequest, FileList]
	mkdir     *lazyClient[PathRequest, Empty]
	remove    *lazyClient[PathRequest, Empty]
	rename    *lazyClient[PathRequest, Empty]
	symlink   *lazyClient[PathRequest, Empty]
	resolve   *lazyClient[PathRequest, PathRequest]
	list      *lazyClient[Empty, ExecList]
	forget    *lazyClient[ForgetRequest, Empty]
	scan      *lazyClient[ScanRequest, ScanChunk]
	readBlobs *lazyClient[ReadBlobsRequest, BlobChunk]
	apply     *lazyClient[ApplyInput, ApplyEvent]
	lifetime  *lazyClient[LifetimeRequest, Empty]
	suspend   *lazyClient[SuspendRequest, Empty]
	helloResp HelloResponse
	// tun is the tunnel channel the agent took (DialLocal); nil: tunnels
	// ride the HTTP/2 connection.
	tun *tunnels
	// lazy opens a tunnel channel on a Dial where the session began
	// without one (lazytunnel.go); nil: Dial streams.
	lazy *lazyTunnels
	// rc passes exec sockets to the agent (execsock.go); nil: every exec
	// is an HTTP/2 stream.
	rc *rightsConn
}

// VersionError is an agent that speaks another protocol version than this
// airlock: a sandbox made by an airlock of another version.
type VersionError struct {
	// Agent is the agent's version; 0 when it did not say (an agent of
	// protocol 3 or before refuses a host of another version outright).
	Agent int
	// Host is this airlock's, Version.
	Host int
}

func (e *VersionError) Error() string {
	if e.Agent == 0 {
		return fmt.Sprintf("the sandbox's agent speaks another protocol than this airlock's (%d)", e.Host)
	}
	return fmt.Sprintf("the sandbox's agent speaks protocol %d, this airlock %d", e.Agent, e.Host)
}

// Dial speaks to the agent at the other end of c and performs the version
// handshake. It returns the layers the agent put in place. An agent of
// another protocol version is a *VersionError.
func Dial(ctx context.Context, c net.Conn) (*Client, []sandbox.Layer, error) {
	return dial(ctx, c, nil)
}

// Attaching is an attachment (AttachExec) sent in the same breath as the
// handshake, before its answer (DialAttached).
type Attaching struct {
	Attach    *ExecAttach
	KeepInput bool
	PTY       bool

	done   chan struct{}
	ex     *Exec
	err    error
	cancel context.CancelFunc
}

// DialAttached is Dial that also attaches to an exec the agent started
// with its config (Config.Run): the attachment is sent right after the
// handshake's request, not after its answer, so that no round trip stands
// between them. Open on a takes the exec's stream, which lives until the
// context given to Open ends; Close lets go of it.
func DialAttached(ctx context.Context, c net.Conn, a *Attaching) (*Client, []sandbox.Layer, error) {
	return dial(ctx, c, a)
}

// Open returns the attached exec's stream, as AttachExec does, once it
// has the agent's answer; the stream ends when ctx does.
func (a *Attaching) Open(ctx context.Context) (*Exec, error) {
	stop := context.AfterFunc(ctx, a.cancel)
	select {
	case <-a.done:
	case <-ctx.Done():
	}
	if ctx.Err() != nil {
		a.cancel()
		return nil, fmt.Errorf("attach to exec %s: %w", a.Attach.ID, ctx.Err())
	}
	if a.err != nil {
		stop()
		a.cancel()
	}
	return a.ex, a.err
}

// Close lets go of the attachment, opened or not.
func (a *Attaching) Close() {
	if a != nil && a.cancel != nil {
		a.cancel()
	}
}

func dial(ctx context.Context, c net.Conn, a *Attaching) (*Client, []sandbox.Layer, error) {
	hc, cc, err := dialConn(c)
	if err != nil {
		return nil, nil, fmt.Errorf("open the agent connection: %w", err)
	}
	o := clientOptions()
	cl := &Client{
		cc:        cc,
		hello:     newLazy[HelloRequest, HelloResponse](hc, baseURL+ProcHello, o...),
		exec:      newLazy[ExecInput, ExecEvent](hc, baseURL+ProcExec, o...),
		signal:    newLazy[SignalRequest, Empty](hc, baseURL+ProcSignal, o...),
		readFile:  newLazy[PathRequest, FileChunk](hc, baseURL+ProcReadFile, o...),
		writeFile: newLazy[FileChunk, Empty](hc, baseURL+ProcWriteFile, o...),
		readDir:   newLazy[PathRequest, FileList](hc, baseURL+ProcReadDir, o...),
		stat:      newLazy[PathRequest, FileList](hc, baseURL+ProcStat, o...),
		mkdir:     newLazy[PathRequest, Empty](hc, baseURL+ProcMkdir, o...),
		remove:    newLazy[PathRequest, Empty](hc, baseURL+ProcRemove, o...),
		rename:    newLazy[PathRequest, Empty](hc, baseURL+ProcRename, o...),
		symlink:   newLazy[PathRequest, Empty](hc, baseURL+ProcSymlink, o...),
		resolve:   newLazy[PathRequest, PathRequest](hc, baseURL+ProcResolve, o...),
		list:      newLazy[Empty, ExecList](hc, baseURL+ProcList, o...),
		forget:    newLazy[ForgetRequest, Empty](hc, baseURL+ProcForget, o...),
		scan:      newLazy[ScanRequest, ScanChunk](hc, baseURL+ProcScan, blobClientOptions()...),
		readBlobs: newLazy[ReadBlobsRequest, BlobChunk](hc, baseURL+ProcReadBlobs, blobClientOptions()...),
		apply:     newLazy[ApplyInput, ApplyEvent](hc, baseURL+ProcApply, blobClientOptions()...),
		lifetime:  newLazy[LifetimeRequest, Empty](hc, baseURL+ProcLifetime, o...),
		suspend:   newLazy[SuspendRequest, Empty](hc, baseURL+ProcSuspend, o...),
	}
	if a != nil {
		// The attachment goes out beside the handshake; the agent answers
		// it once the exec has started.
		var actx context.Context
		actx, a.cancel = context.WithCancel(context.Background())
		a.done = make(chan struct{})
		go func() {
			defer close(a.done)
			a.ex, a.err = cl.AttachExec(actx, a.Attach, a.KeepInput, a.PTY)
		}()
	}
	resp, err := cl.hello.get().CallUnary(ctx, connect.NewRequest(&HelloRequest{Version: Version}))
	if err != nil {
		cc.Close()
		a.Close()
		if connect.CodeOf(err) == connect.CodeFailedPrecondition {
			return nil, nil, fmt.Errorf("agent handshake: %w", &VersionError{Host: Version})
		}
		return nil, nil, fmt.Errorf("agent handshake: %w", hostError(err))
	}
	if resp.Msg.Version != Version {
		cc.Close()
		a.Close()
		return nil, nil, &VersionError{Agent: resp.Msg.Version, Host: Version}
	}
	cl.helloResp = *resp.Msg
	return cl, resp.Msg.Layers, nil
}

// Hello is what the agent said in the handshake.
func (c *Client) Hello() HelloResponse { return c.helloResp }

// List lists the execs the agent holds.
func (c *Client) List(ctx context.Context) ([]ExecInfo, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := c.list.get().CallUnary(ctx, connect.NewRequest(&Empty{}))
	if err != nil {
		return nil, callError(ctx, "list execs", err)
	}
	return resp.Msg.Execs, nil
}

// Forget drops the ended exec id, whose result the host has.
func (c *Client) Forget(ctx context.Context, id string) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	_, err := c.forget.get().CallUnary(ctx, connect.NewRequest(&ForgetRequest{ID: id}))
	return callError(ctx, "forget exec", err)
}

// Close ends the connection; the agent then kills every command and exits.
func (c *Client) Close() error {
	if c.tun != nil {
		c.tun.close()
	}
	if c.lazy != nil {
		c.lazy.close()
	}
	if c.rc != nil {
		c.rc.closeExecs()
	}
	return c.cc.Close()
}

// Exec is one running command on the host's side.
type Exec struct {
	stream execStream
	// sendMu keeps the input half's messages (stdin, resizes) whole and
	// in order; pty says the input half stays open after stdin ends.
	sendMu sync.Mutex
	pty    bool
	// Pid is the main process's pid inside the sandbox.
	Pid int
	// Cgroup is the exec's group below the workload group, as the agent
	// says; the caller must validate it before using it.
	Cgroup string
	// StdoutOffset and StderrOffset are the offsets in each output stream
	// of the first byte the stream carries (0 unless attached).
	StdoutOffset, StderrOffset int64
}

// execStream is an exec's stream: an HTTP/2 stream, or an exec socket
// (execsock.go).
type execStream interface {
	Send(*ExecInput) error
	CloseRequest() error
	Receive() (*ExecEvent, error)
	CloseResponse() error
}

// StartExec starts a command and returns once it runs. A command that
// cannot start (not found, not executable) is a *sandbox.CommandError.
// The returned Exec must be read to the end with Next.
//
// Where the agent takes exec sockets, a foreground exec runs on one; a
// background exec, which may outlive many calls, stays an HTTP/2 stream,
// so that the host's descriptors grow only with the foreground execs
// running.
func (c *Client) StartExec(ctx context.Context, s *ExecStart) (*Exec, error) {
	if c.rc != nil && !s.Background {
		return c.openSocketExec(ctx, &ExecInput{Start: s}, s.PTY != nil, "start exec")
	}
	return c.openExec(ctx, &ExecInput{Start: s}, !s.Stdin && s.PTY == nil, s.PTY != nil, "start exec")
}

// AttachExec attaches to exec id, which the agent holds (see List), from
// the given offsets of its output. keepInput keeps the input half open for
// stdin and resizes; pty says the exec runs on a terminal.
func (c *Client) AttachExec(ctx context.Context, a *ExecAttach, keepInput, pty bool) (*Exec, error) {
	return c.openExec(ctx, &ExecInput{Attach: a}, !keepInput, pty, "attach to exec "+a.ID)
}

func (c *Client) openExec(ctx context.Context, first *ExecInput, closeInput, pty bool, what string) (*Exec, error) {
	st := c.exec.get().CallBidiStream(ctx)
	if err := st.Send(first); err != nil {
		st.CloseRequest()
		st.CloseResponse()
		return nil, fmt.Errorf("%s: %w", what, hostError(err))
	}
	if closeInput {
		_ = st.CloseRequest()
	}
	return started(st, pty, what)
}

// started reads an exec stream's first event: the command runs, or why
// it does not.
func started(st execStream, pty bool, what string) (*Exec, error) {
	ev, err := st.Receive()
	if err != nil {
		st.CloseResponse()
		return nil, fmt.Errorf("%s: %w", what, hostError(err))
	}
	if ev.Exit != nil {
		st.CloseResponse()
		return nil, &sandbox.CommandError{Code: ev.Exit.ExitCode, Msg: ev.Exit.Message}
	}
	if ev.Started <= 0 || ev.StdoutOffset < 0 || ev.StderrOffset < 0 {
		st.CloseResponse()
		return nil, fmt.Errorf("%s: the agent answered out of order", what)
	}
	return &Exec{stream: st, Pid: ev.Started, Cgroup: ev.Cgroup, pty: pty, StdoutOffset: ev.StdoutOffset, StderrOffset: ev.StderrOffset}, nil
}

// SendStdin passes data to the command's stdin; eof closes it (on a
// terminal it changes nothing: see ExecInput).
func (e *Exec) SendStdin(data []byte, eof bool) error {
	e.sendMu.Lock()
	defer e.sendMu.Unlock()
	for len(data) > ChunkSize {
		if err := e.stream.Send(&ExecInput{Stdin: data[:ChunkSize]}); err != nil {
			return err
		}
		data = data[ChunkSize:]
	}
	if err := e.stream.Send(&ExecInput{Stdin: data, StdinEOF: eof}); err != nil {
		return err
	}
	if eof && !e.pty {
		return e.stream.CloseRequest()
	}
	return nil
}

// Resize sets the size of the command's terminal.
func (e *Exec) Resize(size sandbox.TermSize) error {
	if !e.pty {
		return fmt.Errorf("resize: the command has no terminal: %w", sandbox.ErrInvalid)
	}
	e.sendMu.Lock()
	defer e.sendMu.Unlock()
	return e.stream.Send(&ExecInput{Resize: &size})
}

// FeedStdin copies r to the command's stdin until r ends, then closes
// the command's stdin; it stops early when the command no longer reads.
func (e *Exec) FeedStdin(r io.Reader) {
	buf := make([]byte, ChunkSize)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if e.SendStdin(buf[:n], false) != nil {
				return
			}
		}
		if err != nil {
			_ = e.SendStdin(nil, true)
			return
		}
	}
}

// Next returns the next event. The last one has Exit set; after it Next
// returns io.EOF.
func (e *Exec) Next() (*ExecEvent, error) {
	ev, err := e.stream.Receive()
	if err != nil {
		e.stream.CloseResponse()
		if errors.Is(err, io.EOF) {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, hostError(err)
	}
	if ev.Exit != nil {
		e.stream.CloseResponse()
	}
	return ev, nil
}

// Forget tells the agent, on the exec's own stream, that the host has
// its result, where the stream can (an exec socket); false: call
// Client.Forget.
func (e *Exec) Forget() bool {
	if _, ok := e.stream.(*connect.BidiStreamForClient[ExecInput, ExecEvent]); ok {
		return false
	}
	e.sendMu.Lock()
	defer e.sendMu.Unlock()
	return e.stream.Send(&ExecInput{Forget: true}) == nil
}

// Close abandons the stream. Closing the response half first ends a send
// that waits for the agent.
func (e *Exec) Close() {
	e.stream.CloseResponse()
	e.sendMu.Lock()
	defer e.sendMu.Unlock()
	e.stream.CloseRequest()
}

// bounded returns ctx with a deadline no later than CallTimeout from now.
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, CallTimeout)
}

// callError names an agent that did not answer in time.
func callError(ctx context.Context, what string, err error) error {
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%s: the sandbox's agent did not answer within %v: %w", what, CallTimeout, err)
	}
	return hostError(err)
}

// Signal sends sig to exec id; SIGKILL kills its whole tree.
func (c *Client) Signal(ctx context.Context, id string, sig int) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	_, err := c.signal.get().CallUnary(ctx, connect.NewRequest(&SignalRequest{ID: id, Signal: sig}))
	return callError(ctx, "signal", err)
}

// ReadFile copies the file at path to w, at most limit bytes (0: all) from offset.
// FileAPI is the sandbox's file API, served by the agent. Every path is
// resolved inside the sandbox's own root.
type FileAPI struct {
	c        *Client
	noFollow bool
}

// Files returns the sandbox's file API.
func (c *Client) Files() FileAPI { return FileAPI{c: c} }

// NoFollow returns the same file API whose writes follow no symlink on the
// way to their file (see sandbox.Files).
func (f FileAPI) NoFollow() sandbox.Files { return FileAPI{c: f.c, noFollow: true} }

// Resolve returns the path inside the sandbox that path leads to.
func (f FileAPI) Resolve(ctx context.Context, path string) (string, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := f.c.resolve.get().CallUnary(ctx, connect.NewRequest(&PathRequest{Path: path}))
	if err != nil {
		return "", callError(ctx, "resolve", err)
	}
	return resp.Msg.Path, nil
}

func (f FileAPI) ReadFile(ctx context.Context, path string, offset, limit int64, w io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := newStallGuard(cancel)
	defer g.stop()
	g.arm()
	st, err := f.c.readFile.get().CallServerStream(ctx, connect.NewRequest(&PathRequest{Path: path, Offset: offset, Limit: limit}))
	g.disarm()
	if err != nil {
		return g.err("read file", err)
	}
	defer st.Close()
	var n int64
	for {
		// Only the agent's part is timed: a slow writer is the caller's.
		g.arm()
		ok := st.Receive()
		g.disarm()
		if !ok {
			break
		}
		data := st.Msg().Data
		if limit > 0 && n+int64(len(data)) > limit {
			return errors.New("agent sent more than was asked for")
		}
		n += int64(len(data))
		if _, err := w.Write(data); err != nil {
			return err
		}
	}
	return g.err("read file", st.Err())
}

// WriteFile replaces the file at path with what r holds.
func (f FileAPI) WriteFile(ctx context.Context, path string, r io.Reader, mode fs.FileMode) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := newStallGuard(cancel)
	defer g.stop()
	st := f.c.writeFile.get().CallClientStream(ctx)
	buf := make([]byte, ChunkSize)
	first := true
	for {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 || first {
			msg := &FileChunk{Data: buf[:n]}
			if first {
				msg.Path, msg.Mode, msg.NoFollow, first = path, uint32(mode.Perm()), f.noFollow, false
			}
			// Only the agent's part is timed: a slow reader is the caller's.
			g.arm()
			err := st.Send(msg)
			g.disarm()
			if err != nil {
				break // the answer below says why
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			_, _ = st.CloseAndReceive()
			return rerr
		}
	}
	g.arm()
	_, err := st.CloseAndReceive()
	g.disarm()
	return g.err("write file", err)
}

// stallGuard cancels a streaming call when the agent's side of one step of
// it (a send, a receive) takes longer than CallTimeout.
type stallGuard struct {
	t     *time.Timer
	fired atomic.Bool
}

func newStallGuard(cancel context.CancelFunc) *stallGuard {
	g := &stallGuard{}
	g.t = time.AfterFunc(time.Hour, func() { g.fired.Store(true); cancel() })
	g.t.Stop()
	return g
}

func (g *stallGuard) arm()    { g.t.Reset(CallTimeout) }
func (g *stallGuard) disarm() { g.t.Stop() }
func (g *stallGuard) stop()   { g.t.Stop() }

// err names a stall, or classifies err.
func (g *stallGuard) err(what string, err error) error {
	if err != nil && g.fired.Load() {
		return fmt.Errorf("%s: the sandbox's agent made no progress within %v: %w", what, CallTimeout, err)
	}
	return hostError(err)
}

// ReadDir lists the directory at path.
func (f FileAPI) ReadDir(ctx context.Context, path string) ([]sandbox.FileInfo, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := f.c.readDir.get().CallUnary(ctx, connect.NewRequest(&PathRequest{Path: path}))
	if err != nil {
		return nil, callError(ctx, "read dir", err)
	}
	return resp.Msg.Files, nil
}

// Stat describes the file at path.
func (f FileAPI) Stat(ctx context.Context, path string) (sandbox.FileInfo, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := f.c.stat.get().CallUnary(ctx, connect.NewRequest(&PathRequest{Path: path}))
	if err != nil {
		return sandbox.FileInfo{}, callError(ctx, "stat", err)
	}
	if len(resp.Msg.Files) != 1 {
		return sandbox.FileInfo{}, errors.New("agent answered stat with no file")
	}
	return resp.Msg.Files[0], nil
}

// Mkdir makes the directory at path and its parents.
func (f FileAPI) Mkdir(ctx context.Context, path string, mode fs.FileMode) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	_, err := f.c.mkdir.get().CallUnary(ctx, connect.NewRequest(&PathRequest{Path: path, Mode: uint32(mode.Perm()), NoFollow: f.noFollow}))
	return callError(ctx, "mkdir", err)
}

// Remove removes the file or tree at path.
func (f FileAPI) Remove(ctx context.Context, path string) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	_, err := f.c.remove.get().CallUnary(ctx, connect.NewRequest(&PathRequest{Path: path, NoFollow: f.noFollow}))
	return callError(ctx, "remove", err)
}

// Rename moves oldpath to newpath.
func (f FileAPI) Rename(ctx context.Context, oldpath, newpath string) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	_, err := f.c.rename.get().CallUnary(ctx, connect.NewRequest(&PathRequest{Path: oldpath, To: newpath, NoFollow: f.noFollow}))
	return callError(ctx, "rename", err)
}

// Symlink makes a symlink at path pointing to target.
func (f FileAPI) Symlink(ctx context.Context, target, path string) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	_, err := f.c.symlink.get().CallUnary(ctx, connect.NewRequest(&PathRequest{Path: path, To: target, NoFollow: f.noFollow}))
	return callError(ctx, "symlink", err)
}

var (
	_ http.RoundTripper = (*http2.ClientConn)(nil)
	_ sandbox.Files     = FileAPI{}
)

// lazyClient makes its Connect client on first use: most sandboxes never
// call most procedures, and seventeen clients made up front were about 12
// KiB of the host's heap per live sandbox.
type lazyClient[Req, Resp any] struct {
	once sync.Once
	c    *connect.Client[Req, Resp]
	hc   *http.Client
	url  string
	opts []connect.ClientOption
}

func newLazy[Req, Resp any](hc *http.Client, url string, opts ...connect.ClientOption) *lazyClient[Req, Resp] {
	return &lazyClient[Req, Resp]{hc: hc, url: url, opts: opts}
}

func (l *lazyClient[Req, Resp]) get() *connect.Client[Req, Resp] {
	l.once.Do(func() { l.c = connect.NewClient[Req, Resp](l.hc, l.url, l.opts...) })
	return l.c
}
