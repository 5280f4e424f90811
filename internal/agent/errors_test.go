package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// allClasses are the error classes that must survive the trip from the
// agent to the host.
var allClasses = []struct {
	name string
	err  error
	code connect.Code
}{
	{"not_found", sandbox.ErrNotFound, connect.CodeNotFound},
	{"exists", sandbox.ErrExists, connect.CodeAlreadyExists},
	{"outside", sandbox.ErrOutside, connect.CodePermissionDenied},
	{"permission", fs.ErrPermission, connect.CodePermissionDenied},
	{"invalid", sandbox.ErrInvalid, connect.CodeInvalidArgument},
	{"limit", sandbox.ErrLimit, connect.CodeResourceExhausted},
	{"unsupported", sandbox.ErrUnsupported, connect.CodeUnimplemented},
}

// checkClass checks that err matches class and no other class.
func checkClass(t *testing.T, err, class error) {
	t.Helper()
	for _, c := range allClasses {
		if got, want := errors.Is(err, c.err), errors.Is(c.err, class); got != want {
			t.Errorf("errors.Is(%v, %v) = %v, want %v", err, c.err, got, want)
		}
	}
}

func TestWireErrorHostErrorRoundTrip(t *testing.T) {
	for _, c := range allClasses {
		t.Run(c.name, func(t *testing.T) {
			orig := fmt.Errorf("stat /workspace/x: %w", c.err)
			w := WireError(orig)
			var ce *connect.Error
			if !errors.As(w, &ce) {
				t.Fatalf("WireError returned %T", w)
			}
			if ce.Code() != c.code {
				t.Errorf("code = %v, want %v", ce.Code(), c.code)
			}
			if got := ce.Meta().Get(classHeader); got != c.name {
				t.Errorf("%s = %q, want %q", classHeader, got, c.name)
			}
			h := hostError(w)
			checkClass(t, h, c.err)
			if h.Error() != orig.Error() {
				t.Errorf("host message = %q, want %q", h.Error(), orig.Error())
			}
		})
	}
}

func TestWireErrorFromSyscall(t *testing.T) {
	// What the file API really returns for a permission problem.
	orig := &fs.PathError{Op: "open", Path: "/etc/shadow", Err: syscall.EACCES}
	h := hostError(WireError(orig))
	checkClass(t, h, fs.ErrPermission)
	if !strings.Contains(h.Error(), "/etc/shadow") {
		t.Errorf("message = %q", h.Error())
	}
	// ENOENT is no class of airlock's: it becomes an agent error.
	h = hostError(WireError(&fs.PathError{Op: "open", Path: "/x", Err: syscall.ENOENT}))
	checkClass(t, h, nil)
}

func TestWireErrorUnclassified(t *testing.T) {
	if WireError(nil) != nil {
		t.Error("WireError(nil) != nil")
	}
	if hostError(nil) != nil {
		t.Error("hostError(nil) != nil")
	}
	w := WireError(errors.New("disk on fire"))
	var ce *connect.Error
	if !errors.As(w, &ce) || ce.Code() != connect.CodeInternal {
		t.Fatalf("WireError = %v, want CodeInternal", w)
	}
	if ce.Meta().Get(classHeader) != "" {
		t.Errorf("unclassified error has class %q", ce.Meta().Get(classHeader))
	}
	h := hostError(w)
	checkClass(t, h, nil)
	if h.Error() != "agent: disk on fire" {
		t.Errorf("message = %q, want %q", h.Error(), "agent: disk on fire")
	}
}

func TestHostErrorUntrustedInput(t *testing.T) {
	t.Run("unknown class", func(t *testing.T) {
		ce := connect.NewError(connect.CodeNotFound, errors.New("x"))
		ce.Meta().Set(classHeader, "root_access")
		h := hostError(ce)
		checkClass(t, h, nil)
		if h.Error() != "agent: x" {
			t.Errorf("message = %q", h.Error())
		}
	})
	t.Run("code without class", func(t *testing.T) {
		// The code alone does not make a class: only the header does.
		h := hostError(connect.NewError(connect.CodeNotFound, errors.New("x")))
		checkClass(t, h, nil)
	})
	t.Run("long message is cut", func(t *testing.T) {
		long := strings.Repeat("a", 10000)
		h := hostError(WireError(fmt.Errorf("%s: %w", long, sandbox.ErrInvalid)))
		checkClass(t, h, sandbox.ErrInvalid)
		if n := len(h.Error()); n > 512+len("…") {
			t.Errorf("message has %d bytes", n)
		}
		if !strings.HasPrefix(h.Error(), "aaaa") || !strings.HasSuffix(h.Error(), "…") {
			t.Errorf("message = %.20q…%q", h.Error(), h.Error()[len(h.Error())-10:])
		}
	})
	t.Run("long unclassified message is cut", func(t *testing.T) {
		h := hostError(WireError(errors.New(strings.Repeat("b", 4096))))
		if n := len(h.Error()); n > len("agent: ")+512+len("…") {
			t.Errorf("message has %d bytes", n)
		}
	})
	t.Run("message of 512 bytes is whole", func(t *testing.T) {
		msg := strings.Repeat("c", 512)
		h := hostError(connect.NewError(connect.CodeInternal, errors.New(msg)))
		if h.Error() != "agent: "+msg {
			t.Errorf("a 512-byte message was changed")
		}
	})
	t.Run("other errors pass through", func(t *testing.T) {
		orig := fmt.Errorf("dial: %w", context.DeadlineExceeded)
		if h := hostError(orig); h != orig { //nolint:errorlint // identity: passed through unchanged
			t.Errorf("hostError(%v) = %v", orig, h)
		}
	})
	t.Run("wrapped connect error", func(t *testing.T) {
		h := hostError(fmt.Errorf("call: %w", WireError(sandbox.ErrExists)))
		checkClass(t, h, sandbox.ErrExists)
	})
}

// TestErrorClassOverTheWire sends each class through a real Connect call
// over HTTP/2 on an in-memory connection, as agent and host speak.
func TestErrorClassOverTheWire(t *testing.T) {
	srv, cli := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var fail error
	mux := http.NewServeMux()
	mux.Handle(ProcStat, connect.NewUnaryHandlerSimple(ProcStat, func(_ context.Context, req *PathRequest) (*FileList, error) {
		if req.Path == "/ok" {
			return &FileList{Files: []sandbox.FileInfo{{Name: "ok", Path: "/ok", Size: 7, Type: "file"}}}, nil
		}
		return nil, WireError(fail)
	}, HandlerOptions()...))
	done := make(chan struct{})
	go func() { ServeConn(ctx, srv, mux); close(done) }()
	hc, cc, err := dialConn(cli)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cc.Close()
		srv.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("ServeConn did not return after the connection closed")
		}
	}()
	client := connect.NewClient[PathRequest, FileList](hc, baseURL+ProcStat, clientOptions()...)

	resp, err := client.CallUnary(ctx, connect.NewRequest(&PathRequest{Path: "/ok"}))
	if err != nil {
		t.Fatalf("call: %v", err)
	}
	if want := []sandbox.FileInfo{{Name: "ok", Path: "/ok", Size: 7, Type: "file"}}; !reflect.DeepEqual(resp.Msg.Files, want) {
		t.Errorf("answer = %+v", resp.Msg.Files)
	}

	for _, c := range allClasses {
		fail = fmt.Errorf("stat /x: %w", c.err)
		_, err := client.CallUnary(ctx, connect.NewRequest(&PathRequest{Path: "/x"}))
		if err == nil {
			t.Fatalf("%s: the call succeeded", c.name)
		}
		h := hostError(err)
		checkClass(t, h, c.err)
		if h.Error() != fail.Error() {
			t.Errorf("%s: message = %q, want %q", c.name, h.Error(), fail.Error())
		}
	}
	fail = errors.New(strings.Repeat("z", 5000))
	_, err = client.CallUnary(ctx, connect.NewRequest(&PathRequest{Path: "/x"}))
	h := hostError(err)
	checkClass(t, h, nil)
	if len(h.Error()) > 600 || !strings.HasPrefix(h.Error(), "agent: zzz") {
		t.Errorf("long message = %d bytes, %.20q", len(h.Error()), h.Error())
	}
}

func TestJSONCodec(t *testing.T) {
	var c jsonCodec
	if c.Name() != "json" {
		t.Errorf("Name() = %q", c.Name())
	}
	in := &ExecEvent{Stdout: []byte{0, 1, 2, 0xff, 'h', 'i'}, Exit: &sandbox.Result{ExitCode: 3, Reason: sandbox.ReasonExit, LimitsHit: []sandbox.Limit{sandbox.LimitPids}}}
	b, err := c.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	// Bytes travel as base64, so any output survives.
	if !strings.Contains(string(b), `"stdout":"AAEC/2hp"`) {
		t.Errorf("Marshal = %s", b)
	}
	var out ExecEvent
	if err := c.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&out, in) {
		t.Errorf("round trip = %+v, want %+v", out, in)
	}
	// Empty fields stay off the wire.
	if b, _ := c.Marshal(&ExecInput{}); string(b) != "{}" {
		t.Errorf("empty ExecInput = %s", b)
	}
	if b, _ := c.Marshal(&ExecInput{StdinEOF: true}); string(b) != `{"stdin_eof":true}` {
		t.Errorf("ExecInput = %s", b)
	}
	if err := c.Unmarshal([]byte("{not json"), &out); err == nil {
		t.Error("Unmarshal of bad JSON succeeded")
	}
	var syn *json.SyntaxError
	if err := c.Unmarshal([]byte("{"), &out); err == nil || (!errors.As(err, &syn) && !strings.Contains(err.Error(), "unexpected end")) {
		t.Errorf("Unmarshal of truncated JSON = %v", err)
	}
	if err := c.Unmarshal([]byte(`{"started":"x"}`), &out); err == nil {
		t.Error("Unmarshal of a wrong type succeeded")
	}
}
