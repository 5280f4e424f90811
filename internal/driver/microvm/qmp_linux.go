package microvm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// qmp is a client of QEMU's machine protocol (QMP) on a connected socket:
// one JSON object a line each way, commands answered in order, events in
// between. It is used by one goroutine at a time.
type qmp struct {
	conn *net.UnixConn
	r    *bufio.Reader
}

// qmpMessage is an answer or an event.
type qmpMessage struct {
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
	Event string          `json:"event"`
	QMP   json.RawMessage `json:"QMP"`
}

// qmpMaxLine bounds one message from QEMU.
const qmpMaxLine = 1 << 20

// dialQMP reads QEMU's greeting on conn and leaves capabilities
// negotiation mode.
func dialQMP(ctx context.Context, conn *net.UnixConn) (*qmp, error) {
	q := &qmp{conn: conn, r: bufio.NewReaderSize(conn, 64<<10)}
	stop := q.deadline(ctx)
	defer stop()
	m, err := q.read()
	if err != nil {
		return nil, fmt.Errorf("read QEMU's greeting: %w", err)
	}
	if m.QMP == nil {
		return nil, errors.New("QEMU did not greet with QMP")
	}
	if _, err := q.call(ctx, "qmp_capabilities", nil); err != nil {
		return nil, err
	}
	return q, nil
}

// deadline makes the connection's reads and writes end when ctx does.
func (q *qmp) deadline(ctx context.Context) func() {
	if d, ok := ctx.Deadline(); ok {
		_ = q.conn.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = q.conn.SetDeadline(time.Now()) })
	return func() {
		stop()
		_ = q.conn.SetDeadline(time.Time{})
	}
}

func (q *qmp) read() (*qmpMessage, error) {
	line, err := q.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) || len(line) > qmpMaxLine {
		return nil, errors.New("QEMU sent a QMP message too long")
	}
	if err != nil {
		return nil, err
	}
	var m qmpMessage
	if err := json.Unmarshal(line, &m); err != nil {
		return nil, fmt.Errorf("QEMU sent a bad QMP message: %w", err)
	}
	return &m, nil
}

// call runs command with args and returns its answer; events that arrive
// meanwhile are dropped.
func (q *qmp) call(ctx context.Context, command string, args any) (json.RawMessage, error) {
	return q.callFD(ctx, command, args, nil)
}

// callFD is call with a file passed along (SCM_RIGHTS), as getfd wants.
func (q *qmp) callFD(ctx context.Context, command string, args any, f *os.File) (json.RawMessage, error) {
	stop := q.deadline(ctx)
	defer stop()
	req := map[string]any{"execute": command}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	b = append(b, '\n')
	if f != nil {
		_, _, err = q.conn.WriteMsgUnix(b, unix.UnixRights(int(f.Fd())), nil)
	} else {
		_, err = q.conn.Write(b)
	}
	if err != nil {
		return nil, fmt.Errorf("QMP %s: %w", command, err)
	}
	for {
		m, err := q.read()
		if err != nil {
			return nil, fmt.Errorf("QMP %s: %w", command, err)
		}
		if m.Error != nil {
			return nil, fmt.Errorf("QMP %s: %s: %s", command, m.Error.Class, m.Error.Desc)
		}
		if m.Return != nil {
			return m.Return, nil
		}
	}
}

// Close closes the connection.
func (q *qmp) Close() error { return q.conn.Close() }
