package agentd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/ring"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// An exec belongs to the agent, not to the host's stream that started it.
// Its output goes into a ring per stream (internal/ring) that the agent
// keeps, and its result is kept once it has ended, until the host says it
// has it (Forget) or the bounds below drop it. A host stream is an
// attachment: it carries the output from some offsets on, then the
// result, and feeds the exec's stdin and terminal. While a stream is
// attached the rings drop nothing it has not sent: the command waits for
// the host, as it did when its output went straight to the stream. When
// the stream ends (a host that died or let go) the command runs on, the
// rings keep its latest output, and a later host attaches again (after a
// daemon restart, see agent.Config.Listen).

// Bounds of what the agent keeps of ended execs whose result no host has
// collected.
const (
	maxEndedExecs  = 64
	maxEndedOutput = 16 << 20
	endedKeep      = time.Hour
)

// execState is one exec the agent holds, running or ended.
type execState struct {
	id      string
	st      *agent.ExecStart
	p       *proc
	eio     *execIO
	rings   []*ring.Buffer // stdout and stderr, or the terminal's one stream
	started time.Time
	// pidsBefore is the workload's pids.max counter before the start.
	pidsBefore int64

	// inMu keeps writes to the exec's input whole and in order, whichever
	// attachment sends them.
	inMu sync.Mutex

	mu        sync.Mutex
	stdinOpen bool
	pty       *sandbox.TermSize // the terminal's size now
	att       *attachment       // the attached stream; nil when none
	room      chan struct{}     // closed and replaced when att moves or changes

	done   chan struct{}
	result sandbox.Result
	ended  time.Time
}

// attachment is a host stream attached to an exec: sent[i] is how far it
// has sent ring i.
type attachment struct {
	sent []int64
}

// wake tells the writers waiting for room to look again. es.mu is held.
func (es *execState) wake() {
	close(es.room)
	es.room = make(chan struct{})
}

// attachAt makes a new attachment from offs (clamped to what the rings
// still hold), replacing the one before, and returns it and its offsets.
func (es *execState) attachAt(offs []int64) (*attachment, []int64) {
	es.mu.Lock()
	defer es.mu.Unlock()
	from := make([]int64, len(es.rings))
	for i, r := range es.rings {
		start, _, _ := r.Bounds()
		if i < len(offs) {
			from[i] = max(offs[i], start)
		} else {
			from[i] = start
		}
	}
	es.att = &attachment{sent: slices.Clone(from)}
	es.wake()
	return es.att, from
}

// detach ends att, if it is still the exec's attachment.
func (es *execState) detach(att *attachment) {
	es.mu.Lock()
	defer es.mu.Unlock()
	if es.att == att {
		es.att = nil
		es.wake()
	}
}

// advance records that att has sent ring i up to off.
func (es *execState) advance(att *attachment, i int, off int64) {
	es.mu.Lock()
	defer es.mu.Unlock()
	if es.att == att {
		att.sent[i] = off
		es.wake()
	}
}

// write puts data into ring i, waiting while the attached stream has not
// sent what the write would drop. It returns false once the ring is
// closed (the exec has ended; what its survivors print goes nowhere).
func (es *execState) write(i int, data []byte) bool {
	r := es.rings[i]
	for len(data) > 0 {
		k := min(len(data), r.Size())
		es.mu.Lock()
		for {
			_, end, closed := r.Bounds()
			if closed {
				es.mu.Unlock()
				return false
			}
			if es.att == nil || end+int64(k)-es.att.sent[i] <= int64(r.Size()) {
				break
			}
			room := es.room
			es.mu.Unlock()
			<-room
			es.mu.Lock()
		}
		// Under es.mu, so that an attachment never sees a write half done.
		_, _ = r.Write(data[:k])
		es.mu.Unlock()
		data = data[k:]
	}
	return true
}

// closeRings ends the output streams: readers reach their ends, writers
// stop waiting.
func (es *execState) closeRings() {
	es.mu.Lock()
	defer es.mu.Unlock()
	for _, r := range es.rings {
		r.Close()
	}
	es.wake()
}

// isDone says whether the exec has ended.
func (es *execState) isDone() bool {
	select {
	case <-es.done:
		return true
	default:
		return false
	}
}

// kept is how many bytes of output the exec holds.
func (es *execState) kept() int64 {
	var n int64
	for _, r := range es.rings {
		start, end, _ := r.Bounds()
		n += end - start
	}
	return n
}

// info describes the exec for List.
func (es *execState) info() agent.ExecInfo {
	es.mu.Lock()
	defer es.mu.Unlock()
	in := agent.ExecInfo{
		ID: es.id, Argv: es.st.Argv, Background: es.st.Background, Pid: es.p.pid, Cgroup: es.p.cgroupName,
		StartedMS: es.started.UnixMilli(), TimeoutMS: es.st.TimeoutMS, CPUTimeMS: es.st.CPUTimeMS,
		OutputLimit: es.st.OutputLimit, Stdin: es.stdinOpen,
	}
	if es.pty != nil {
		sz := *es.pty
		in.PTY = &sz
	}
	if es.isDone() {
		r := es.result
		in.Result = &r
		in.Stdin = false
	}
	return in
}

// execs are the engine's book of what it holds.
type execBook struct {
	mu    sync.Mutex
	byID  map[string]*execState
	order []string // ids, oldest first
	// seq is the highest N of the ids "eN" started.
	seq int64
}

func (b *execBook) add(es *execState) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byID == nil {
		b.byID = map[string]*execState{}
	}
	if _, dup := b.byID[es.id]; dup {
		return fmt.Errorf("exec %s: %w", es.id, sandbox.ErrExists)
	}
	b.byID[es.id] = es
	b.order = append(b.order, es.id)
	if n, ok := strings.CutPrefix(es.id, "e"); ok {
		if v, err := strconv.ParseInt(n, 10, 64); err == nil && v > b.seq {
			b.seq = v
		}
	}
	return nil
}

func (b *execBook) get(id string) *execState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.byID[id]
}

func (b *execBook) lastSeq() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seq
}

// all returns what the book holds, oldest first.
func (b *execBook) all() []*execState {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*execState, 0, len(b.order))
	for _, id := range b.order {
		out = append(out, b.byID[id])
	}
	return out
}

// forget drops the ended exec id; a running one stays.
func (b *execBook) forget(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if es := b.byID[id]; es != nil && es.isDone() {
		b.drop(id)
	}
}

// drop removes id. b.mu is held.
func (b *execBook) drop(id string) {
	delete(b.byID, id)
	if i := slices.Index(b.order, id); i >= 0 {
		b.order = slices.Delete(b.order, i, i+1)
	}
}

// trim drops the oldest ended execs past the bounds, and those older
// than endedKeep.
func (b *execBook) trim(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ended []*execState
	var bytes int64
	for _, id := range b.order {
		if es := b.byID[id]; es.isDone() {
			ended = append(ended, es)
			bytes += es.kept()
		}
	}
	for _, es := range ended {
		if len(ended) <= maxEndedExecs && bytes <= maxEndedOutput && now.Sub(es.ended) < endedKeep {
			break
		}
		b.drop(es.id)
		bytes -= es.kept()
		ended = ended[1:]
	}
}

// startExec starts the command st asks for and registers it, attached to
// the stream that started it (the attachment returned).
func (s *server) startExec(st *agent.ExecStart) (*execState, *attachment, error) {
	if s.eng.execs.get(st.ID) != nil {
		return nil, nil, fmt.Errorf("exec %s: %w", st.ID, sandbox.ErrExists)
	}
	eio, err := s.execIO(st)
	if err != nil {
		return nil, nil, err
	}
	size := st.OutputBuffer
	if size <= 0 {
		size = agent.DefaultOutputBuffer
		if st.OutputLimit > 0 {
			size = min(size, st.OutputLimit)
		}
	}
	size = min(max(size, 4<<10), 256<<20)
	es := &execState{id: st.ID, st: st, eio: eio, room: make(chan struct{}), done: make(chan struct{}), stdinOpen: eio.input != nil}
	for range eio.outputs {
		es.rings = append(es.rings, ring.New(int(size)))
	}
	if st.PTY != nil {
		sz := *st.PTY
		es.pty = &sz
	}
	es.att = &attachment{sent: make([]int64, len(es.rings))}
	if s.eng.workload != nil {
		es.pidsBefore = s.eng.workload.PidsMax()
	}
	p, err := s.eng.start(st, eio.stdin, eio.stdout, eio.stderr)
	eio.closeCommandEnds()
	if err != nil {
		eio.closeAll()
		return nil, nil, err
	}
	es.p, es.started = p, p.started
	if err := s.eng.execs.add(es); err != nil {
		s.eng.kill(p, sandbox.ReasonKilled)
		eio.closeAll()
		return nil, nil, err
	}
	go s.runExec(es)
	return es, es.att, nil
}

// runExec carries the exec's output into its rings, holds it to its
// limits, and settles its result once it has ended.
func (s *server) runExec(es *execState) {
	st, p, eio := es.st, es.p, es.eio
	// Output: each stream is counted; past the limit the exec is killed.
	var outWG sync.WaitGroup
	var written [2]atomic.Int64
	var truncated [2]atomic.Bool
	for i, r := range eio.outputs {
		outWG.Add(1)
		go func() {
			defer outWG.Done()
			if eio.master == nil {
				defer r.Close()
			}
			buf := make([]byte, agent.ChunkSize)
			open := true
			for {
				n, err := r.Read(buf)
				if n > 0 && open {
					data := buf[:n]
					if left := st.OutputLimit - written[i].Load(); st.OutputLimit > 0 && int64(n) > left {
						data = buf[:max(left, 0)]
						if truncated[i].CompareAndSwap(false, true) {
							go s.eng.kill(p, sandbox.ReasonOutputLimit)
						}
					}
					written[i].Add(int64(len(data)))
					// A closed ring: the exec has ended, and what its
					// survivors print is read and dropped.
					open = es.write(i, data)
				}
				if err != nil {
					// A terminal whose last holder closed it answers EIO.
					return
				}
			}
		}()
	}

	ws := s.watch(p, st)
	if p.group != nil && !st.Background {
		// A command owns its whole tree: what it left running ends with it.
		s.eng.killTree(p)
	} else if !st.Background {
		_ = unix.Kill(-p.pid, unix.SIGKILL)
	}
	drained := make(chan struct{})
	go func() { outWG.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainGrace(st.Background)):
	}
	es.inMu.Lock()
	es.mu.Lock()
	es.stdinOpen = false
	es.mu.Unlock()
	eio.closeAgentEnds()
	es.inMu.Unlock()
	es.closeRings()

	var res sandbox.Result
	res.ExitCode, res.Signal = exitOf(ws)
	res.Usage.WallMS = time.Since(p.started).Milliseconds()
	res.Usage.BytesWritten = written[0].Load() + written[1].Load()
	res.StdoutTruncated, res.StderrTruncated = truncated[0].Load(), truncated[1].Load()
	reason, _ := p.reason.Load().(sandbox.Reason)
	var stats struct{ oom, pids bool }
	if p.group != nil {
		gs, _ := p.group.Stats()
		res.Usage.CPUMS = gs.CPUNanos / 1e6
		res.Usage.MemoryPeakBytes = gs.MemoryPeak
		stats.oom = gs.OOMKills > 0
		stats.pids = gs.PidsMax > 0 || s.eng.workload.PidsMax() > es.pidsBefore
	}
	res.Classify(reason, sandbox.Evidence{OOM: stats.oom, Pids: stats.pids, DiskFull: diskFull()})
	if !st.Background {
		s.eng.remove(p)
	} else {
		go func() { <-drained; s.eng.remove(p) }()
	}
	es.mu.Lock()
	es.result, es.ended = res, time.Now()
	es.mu.Unlock()
	close(es.done)
	s.eng.execs.trim(time.Now())
	// A result nobody collects is dropped after endedKeep.
	time.AfterFunc(endedKeep, func() { s.eng.execs.trim(time.Now()) })
	// The next command's spawner is prepared while the sandbox is idle,
	// not while a command starts or runs, nor while its result is sent
	// (follow prepares it once it has sent the result; this is for an
	// exec no stream follows).
	time.AfterFunc(prepareDelay, s.eng.prepare)
}

// follow sends the exec's output from offs on over stream as att, then
// its result. Ending the stream (ctx) ends the following, not the exec.
func (s *server) follow(ctx context.Context, send func(*agent.ExecEvent) error, es *execState, att *attachment, offs []int64) error {
	defer es.detach(att)
	buf := make([]byte, agent.ChunkSize)
	changed := make([]<-chan struct{}, len(es.rings))
	for {
		progressed, ended := false, true
		for i, r := range es.rings {
			// Changed is taken before the read: a write in between wakes
			// the wait below.
			changed[i] = r.Changed()
			n, at := r.ReadAt(buf, offs[i])
			if n > 0 {
				ev := &agent.ExecEvent{Stdout: buf[:n]}
				if i == 1 {
					ev = &agent.ExecEvent{Stderr: buf[:n]}
				}
				if err := send(ev); err != nil {
					return err
				}
				offs[i] = at + int64(n)
				es.advance(att, i, offs[i])
				progressed = true
			}
			if _, end, closed := r.Bounds(); !closed || offs[i] < end {
				ended = false
			}
		}
		if progressed {
			continue
		}
		if ended {
			select {
			case <-es.done: // set just after the rings close
			case <-ctx.Done():
				return ctx.Err()
			}
			es.mu.Lock()
			res := es.result
			es.mu.Unlock()
			err := send(&agent.ExecEvent{Exit: &res})
			go s.eng.prepare()
			return err
		}
		select {
		case <-changed[0]:
		case <-changed[len(changed)-1]:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// feed passes what the host sends (recv: the stream's next message) to
// the exec's input: stdin data, the end of stdin (pipes), and terminal
// resizes, until the host's half of the stream ends. The end of a stream
// closes nothing: a later attachment may go on feeding it.
func (s *server) feed(recv func() (*agent.ExecInput, error), es *execState) {
	x := es.eio
	for {
		msg, err := recv()
		if err != nil {
			return
		}
		es.inMu.Lock()
		es.mu.Lock()
		open := es.stdinOpen
		es.mu.Unlock()
		if len(msg.Stdin) > 0 && open {
			if _, err := x.input.Write(msg.Stdin); err != nil {
				es.inMu.Unlock()
				return
			}
		}
		if msg.Resize != nil && x.master != nil && open {
			if resize(x.master, *msg.Resize) == nil {
				sz := *msg.Resize
				es.mu.Lock()
				es.pty = &sz
				es.mu.Unlock()
			}
		}
		if msg.StdinEOF && x.master == nil && open {
			es.mu.Lock()
			es.stdinOpen = false
			es.mu.Unlock()
			x.input.Close()
		}
		es.inMu.Unlock()
	}
}

// attachExec serves an Exec stream whose first message is an attachment.
func (s *server) attachExec(ctx context.Context, stream *connect.BidiStream[agent.ExecInput, agent.ExecEvent], send func(*agent.ExecEvent) error, a *agent.ExecAttach) error {
	if !sandbox.ValidID(a.ID) || a.StdoutOffset < 0 || a.StderrOffset < 0 {
		return agent.WireError(fmt.Errorf("attach needs a valid id and offsets: %w", sandbox.ErrInvalid))
	}
	if r := s.cfg.Run; r != nil && a.ID == r.ID && s.runStarted != nil {
		<-s.runStarted
		if s.runErr != nil {
			return startFailed(send, s.runErr)
		}
	}
	es := s.eng.execs.get(a.ID)
	if es == nil {
		return agent.WireError(fmt.Errorf("exec %s: %w", a.ID, sandbox.ErrNotFound))
	}
	att, offs := es.attachAt([]int64{a.StdoutOffset, a.StderrOffset})
	ev := &agent.ExecEvent{Started: max(es.p.pid, 1), Cgroup: es.p.cgroupName, StdoutOffset: offs[0]}
	if len(offs) > 1 {
		ev.StderrOffset = offs[1]
	}
	if err := send(ev); err != nil {
		es.detach(att)
		return err
	}
	if es.eio.input != nil {
		go s.feed(stream.Receive, es)
	}
	return s.follow(ctx, send, es, att, offs)
}

func (s *server) list(context.Context, *agent.Empty) (*agent.ExecList, error) {
	s.eng.execs.trim(time.Now())
	out := &agent.ExecList{Execs: []agent.ExecInfo{}}
	for _, es := range s.eng.execs.all() {
		out.Execs = append(out.Execs, es.info())
	}
	return out, nil
}

func (s *server) forget(_ context.Context, req *agent.ForgetRequest) (*agent.Empty, error) {
	s.eng.execs.forget(req.ID)
	return &agent.Empty{}, nil
}

// errNoStart is an Exec stream whose first message neither starts nor
// attaches.
var errNoStart = errors.New("exec needs a start or an attach message with a valid id")
