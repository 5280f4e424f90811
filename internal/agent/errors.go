package agent

import (
	"errors"
	"io/fs"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// classHeader carries an error's class across the wire, so the host can
// rebuild an error that errors.Is matches.
const classHeader = "Airlock-Error-Class"

var classes = []struct {
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

// WireError turns an agent-side error into a Connect error with its class.
func WireError(err error) error {
	if err == nil {
		return nil
	}
	for _, c := range classes {
		if errors.Is(err, c.err) {
			ce := connect.NewError(c.code, err)
			ce.Meta().Set(classHeader, c.name)
			return ce
		}
	}
	return connect.NewError(connect.CodeInternal, err)
}

// classedError is an error from the agent, matching its class.
type classedError struct {
	msg   string
	class error
}

func (e *classedError) Error() string { return e.msg }
func (e *classedError) Unwrap() error { return e.class }

// hostError turns an error from a call into one the host can classify.
// Messages come from the untrusted agent and are cut to a sane length.
func hostError(err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	msg := ce.Message()
	if len(msg) > 512 {
		msg = msg[:512] + "…"
	}
	name := ce.Meta().Get(classHeader)
	for _, c := range classes {
		if c.name == name {
			return &classedError{msg: msg, class: c.err}
		}
	}
	return &classedError{msg: "agent: " + msg}
}
