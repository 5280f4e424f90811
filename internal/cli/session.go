package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/tty"
)

// leaveKey ends an interactive session from the caller's side (Ctrl-\):
// in raw mode no key signals airlock itself.
const leaveKey = 0x1c

// eot is Ctrl-D: the terminal's end-of-file character.
const eot = 0x04

// defaultSize is a session's terminal when the caller's has no size (its
// output is not a terminal).
var defaultSize = tty.Size{Rows: 24, Cols: 80}

// Session is the caller's side of a command on a terminal: the caller's
// terminal in raw mode (when stdin is one), what is typed sent to the
// command, resizes passed on, and Ctrl-\, SIGQUIT, SIGTERM, SIGHUP and
// SIGINT to leave. Whatever ends it, the caller's terminal is restored.
type Session struct {
	stdin  io.Reader
	stdout io.Writer
	inFd   int  // -1 when stdin is not a file
	outFd  int  // -1 when stdout is not a file
	raw    bool // stdin is a terminal: raw mode, Ctrl-\ leaves
	screen bool // stdout is a terminal: Reset is written at the end

	cancel  context.CancelFunc
	state   *tty.State
	mu      sync.Mutex
	resize  func(tty.Size) error // set by begin
	stopSig func()
	once    sync.Once
	left    chan struct{} // closed when the caller left
}

// NewSession makes the session of a command that will run on a terminal,
// before anything else happens: a signal that means "leave" (Ctrl-\ is
// SIGQUIT until raw mode starts) cancels the returned context from then
// on. Call End when done.
func NewSession(ctx context.Context, stdin io.Reader, stdout io.Writer) (*Session, context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	s := &Session{stdin: stdin, stdout: stdout, inFd: -1, outFd: -1, left: make(chan struct{}), cancel: cancel}
	if f, ok := stdin.(*os.File); ok {
		s.inFd = int(f.Fd())
		s.raw = tty.IsTerminal(s.inFd)
	}
	if f, ok := stdout.(*os.File); ok {
		s.outFd = int(f.Fd())
		s.screen = tty.IsTerminal(s.outFd)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGWINCH, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case sig := <-sigs:
				if sig != syscall.SIGWINCH {
					s.leave()
					continue
				}
				s.mu.Lock()
				resize := s.resize
				s.mu.Unlock()
				if resize != nil {
					_ = resize(s.Size())
				}
			}
		}
	}()
	s.stopSig = func() {
		signal.Stop(sigs)
		close(stop)
		wg.Wait()
	}
	return s, ctx
}

// Size is the caller's terminal size: its output's, else its input's,
// else 24x80.
func (s *Session) Size() tty.Size {
	for _, fd := range []int{s.outFd, s.inFd} {
		if fd < 0 {
			continue
		}
		if sz, err := tty.GetSize(fd); err == nil && sz.Rows > 0 && sz.Cols > 0 {
			return sz
		}
	}
	return defaultSize
}

// Raw says the caller's terminal is joined to the process's (stdin is a
// terminal, in raw mode once Begin has run).
func (s *Session) Raw() bool { return s.raw }

// Begin puts the caller's terminal into raw mode and starts passing what
// is typed to send and the terminal's new sizes to resize.
func (s *Session) Begin(ctx context.Context, send func([]byte) error, resize func(tty.Size) error) error {
	if s.raw {
		st, err := tty.MakeRaw(s.inFd)
		if err != nil {
			return err
		}
		s.state = st
	}
	if s.screen {
		_, _ = io.WriteString(s.stdout, tty.Start)
	}
	s.mu.Lock()
	s.resize = resize
	s.mu.Unlock()
	go s.pump(ctx, send)
	return nil
}

// leave ends the session from the caller's side, once.
func (s *Session) leave() {
	s.once.Do(func() {
		close(s.left)
		s.cancel()
	})
}

// Cancel ends the session's context: the command is killed.
func (s *Session) Cancel() { s.cancel() }

// HasLeft says whether the caller left.
func (s *Session) HasLeft() bool {
	select {
	case <-s.left:
		return true
	default:
		return false
	}
}

// pump sends what is typed, until stdin ends (a piped input's end is
// sent as Ctrl-D), sending fails, or Ctrl-\.
// It may outlive the session, blocked in a read: airlock exits then.
func (s *Session) pump(ctx context.Context, send func([]byte) error) {
	buf := make([]byte, 32<<10)
	for ctx.Err() == nil {
		n, err := s.stdin.Read(buf)
		data := buf[:n]
		quit := false
		if s.raw {
			if i := bytes.IndexByte(data, leaveKey); i >= 0 {
				data, quit = data[:i], true
			}
		}
		if len(data) > 0 && send(data) != nil {
			return
		}
		if quit {
			s.leave()
			return
		}
		if err != nil {
			// The end of a piped input: typed as Ctrl-D, which a program
			// reading a line at its start takes as the end of its input.
			if !s.raw {
				_ = send([]byte{eot})
			}
			return
		}
	}
}

// End restores the caller's terminal: its modes, and what the program may
// have switched on in it (when the session began). It may be called more
// than once.
func (s *Session) End() {
	s.stopSig()
	s.stopSig = func() {}
	s.cancel()
	if s.screen && s.resize != nil {
		_, _ = io.WriteString(s.stdout, tty.Reset)
	}
	if s.state != nil {
		_ = s.state.Restore()
		s.state = nil
	}
	s.screen = false
}

// TTYEnv adds the caller's TERM to env, unless env sets one.
func TTYEnv(env map[string]string) map[string]string {
	if _, ok := env["TERM"]; ok {
		return env
	}
	t := os.Getenv("TERM")
	if t == "" {
		return env
	}
	if env == nil {
		env = map[string]string{}
	}
	env["TERM"] = t
	return env
}

// LeftMessage is what airlock says when the caller left.
func LeftMessage(what string) string {
	return fmt.Sprintf("airlock: the session was ended from this side (Ctrl-\\, or a signal to airlock); %s", what)
}
