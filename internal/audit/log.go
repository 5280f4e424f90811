package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned by Append after Close.
var ErrClosed = errors.New("audit log is closed")

// Options configure a Log.
type Options struct {
	// Key signs checkpoints. Required (see LoadOrCreateKey).
	Key ed25519.PrivateKey
	// HeadPath is where the latest checkpoint is stored after each one
	// (see Head); empty stores none. Keep it outside the log's directory
	// if the log is shipped elsewhere.
	HeadPath string
	// CheckpointEvery is the most events between two checkpoints; zero
	// means DefaultCheckpointEvery.
	CheckpointEvery int
	// CheckpointInterval is the longest an event waits for the checkpoint
	// that seals it; zero means DefaultCheckpointInterval.
	CheckpointInterval time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives the writer's own troubles; nil discards them.
	Logger *slog.Logger
}

// The sealing window: a running log signs a checkpoint after at most
// DefaultCheckpointEvery events, and at most DefaultCheckpointInterval
// after an event. Lines after the last checkpoint (after a crash, at most
// that many) are not covered by a signature: Verify reports them as
// unsealed.
const (
	DefaultCheckpointEvery    = 100
	DefaultCheckpointInterval = time.Second
)

// Log appends events to an audit file. Its methods are safe for
// concurrent use.
type Log struct {
	opts Options
	path string
	f    *os.File
	reqs chan request
	quit chan struct{}
	done chan struct{}

	// committed is the file's length after the last write that was
	// fsync'ed: readers (Query, Verify) stop there, so that they never
	// see a batch half written.
	committed atomic.Int64

	closeOnce sync.Once
	mu        sync.Mutex
	err       error // sticky: after a write failure every Append fails
	closed    bool
}

type request struct {
	ev    Event
	reply chan error
}

// tailWindow is how much of an existing log Open reads to find its last
// line; one event is far smaller (code is at most 128 KiB).
const tailWindow = 4 << 20

// Open opens or creates the log at path for appending. On an existing log
// it continues the chain from the last complete line; a torn final line
// (left by a crash) is cut off and recorded in a "recover" event. It then
// writes a checkpoint.
func Open(path string, opts Options) (*Log, error) {
	if len(opts.Key) != ed25519.PrivateKeySize {
		return nil, errors.New("open audit log: no signing key")
	}
	if opts.CheckpointEvery <= 0 {
		opts.CheckpointEvery = DefaultCheckpointEvery
	}
	if opts.CheckpointInterval <= 0 {
		opts.CheckpointInterval = DefaultCheckpointInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	seq, prev, torn, err := tail(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open audit log %s: %w", path, err)
	}
	var pending []Event
	if len(torn) > 0 {
		st, _ := f.Stat()
		if err := f.Truncate(st.Size() - int64(len(torn))); err != nil {
			f.Close()
			return nil, fmt.Errorf("open audit log %s: cut torn tail: %w", path, err)
		}
		pending = append(pending, Event{Kind: KindRecover, Size: int64(len(torn)), SHA256: Digest(torn),
			Reason: fmt.Sprintf("torn final line of %d bytes (after seq %d) cut off: the previous writer crashed mid-write", len(torn), seq)})
		opts.Logger.Warn("audit log had a torn final line; cut it off and recorded it", "bytes", len(torn))
	}
	end, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open audit log %s: %w", path, err)
	}
	l := &Log{opts: opts, path: path, f: f, reqs: make(chan request, 256), quit: make(chan struct{}), done: make(chan struct{})}
	l.committed.Store(end)
	w := &writer{l: l, seq: seq, prev: prev}
	if err := w.write(pending, "open"); err != nil {
		f.Close()
		return nil, fmt.Errorf("open audit log %s: %w", path, err)
	}
	go w.run()
	return l, nil
}

// tail finds the seq and hash of the last complete line of f, and any
// bytes after it (a torn line).
func tail(f *os.File) (seq uint64, prev string, torn []byte, err error) {
	st, err := f.Stat()
	if err != nil {
		return 0, "", nil, err
	}
	size := st.Size()
	if size == 0 {
		return 0, "", nil, nil
	}
	off := max(size-tailWindow, 0)
	buf := make([]byte, size-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return 0, "", nil, err
	}
	end := bytes.LastIndexByte(buf, '\n')
	if end < 0 {
		if off > 0 {
			return 0, "", nil, errors.New("last line is longer than 4 MiB: not an audit log")
		}
		return 0, "", buf, nil // a single torn line and nothing else
	}
	torn = buf[end+1:]
	start := bytes.LastIndexByte(buf[:end], '\n') + 1
	if start == 0 && off > 0 {
		return 0, "", nil, errors.New("last line is longer than 4 MiB: not an audit log")
	}
	line := buf[start:end]
	var ev Event
	if err := json.Unmarshal(line, &ev); err != nil || ev.Seq == 0 {
		return 0, "", nil, errors.New("last complete line is not an audit event: run `airlock audit verify` on it")
	}
	return ev.Seq, Digest(line), torn, nil
}

// Append writes ev and returns once it is on disk (written and fsync'ed
// with the batch it came in). It fills Seq, Prev, and Time when zero.
// If ctx ends first Append returns ctx's error; the event may still be
// written.
func (l *Log) Append(ctx context.Context, ev Event) error {
	l.mu.Lock()
	closed, err := l.closed, l.err
	l.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if err != nil {
		return err
	}
	r := request{ev: ev, reply: make(chan error, 1)}
	select {
	case l.reqs <- r:
	case <-l.done:
		return ErrClosed
	case <-ctx.Done():
		return fmt.Errorf("append audit event: %w", ctx.Err())
	}
	select {
	case err := <-r.reply:
		return err
	case <-ctx.Done():
		return fmt.Errorf("append audit event: %w", ctx.Err())
	}
}

// Err returns why the log refuses events: the first write that failed
// (refusals are sticky until the log is opened again), ErrClosed after
// Close, or nil while it works.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	if l.closed {
		return ErrClosed
	}
	return nil
}

// Egress records one egress decision of the proxy: host and resolved ip,
// the rule that matched, why, and whether the connection was allowed.
func (l *Log) Egress(ctx context.Context, key, sandboxID, host, ip, rule, reason string, allow bool) error {
	d := "deny"
	if allow {
		d = "allow"
	}
	return l.Append(ctx, Event{Kind: KindEgress, Key: key, Sandbox: sandboxID, Host: host, IP: ip, Rule: rule, Reason: reason, Decision: d})
}

// Recent returns the last n complete lines of the log (at most 4 MiB of
// it), oldest first, as raw JSON.
func (l *Log) Recent(n int) ([]json.RawMessage, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	off := max(st.Size()-tailWindow, 0)
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	buf = buf[:bytes.LastIndexByte(buf, '\n')+1]
	if off > 0 { // the first line may be partial
		buf = buf[bytes.IndexByte(buf, '\n')+1:]
	}
	lines := bytes.Split(bytes.TrimSuffix(buf, []byte("\n")), []byte("\n"))
	if len(lines) == 1 && len(lines[0]) == 0 {
		return nil, nil
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	out := make([]json.RawMessage, len(lines))
	for i, b := range lines {
		out[i] = json.RawMessage(b)
	}
	return out, nil
}

// PublicKey returns the key that verifies this log's checkpoints.
func (l *Log) PublicKey() ed25519.PublicKey { return l.opts.Key.Public().(ed25519.PublicKey) }

// Close writes a final checkpoint, syncs and closes the file. Events
// appended concurrently with Close may fail with ErrClosed.
func (l *Log) Close() error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		close(l.quit)
		<-l.done
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// writer is the state of the one goroutine that writes.
type writer struct {
	l       *Log
	seq     uint64
	prev    string
	sinceCk int
	lastCk  time.Time
	buf     []byte
}

func (w *writer) run() {
	l := w.l
	defer close(l.done)
	tick := time.NewTicker(l.opts.CheckpointInterval)
	defer tick.Stop()
	var batch []request
	for {
		batch = batch[:0]
		select {
		case r := <-l.reqs:
			batch = append(batch, r)
		drain:
			for len(batch) < 1024 {
				select {
				case r := <-l.reqs:
					batch = append(batch, r)
				default:
					break drain
				}
			}
		case <-tick.C:
			if w.sinceCk > 0 {
				w.commit(nil, "interval")
			}
			continue
		case <-l.quit:
			// Take what was queued, then seal.
			for {
				select {
				case r := <-l.reqs:
					batch = append(batch, r)
					continue
				default:
				}
				break
			}
			w.commit(batch, "close")
			l.f.Close()
			return
		}
		// write seals every CheckpointEvery events by itself; the ticker
		// seals what waits longer than CheckpointInterval.
		why := ""
		if l.opts.Now().Sub(w.lastCk) >= l.opts.CheckpointInterval {
			why = "periodic"
		}
		w.commit(batch, why)
	}
}

// commit writes batch (and a checkpoint when why is set) and answers it.
func (w *writer) commit(batch []request, why string) {
	evs := make([]Event, len(batch))
	for i, r := range batch {
		evs[i] = r.ev
	}
	w.l.mu.Lock()
	err := w.l.err
	w.l.mu.Unlock()
	if err == nil {
		err = w.write(evs, why)
		if err != nil {
			err = fmt.Errorf("write audit log: %w", err)
			w.l.opts.Logger.Error("audit log write failed; refusing further events", "err", err)
			w.l.mu.Lock()
			w.l.err = err
			w.l.mu.Unlock()
		}
	}
	for _, r := range batch {
		r.reply <- err
	}
}

// write appends evs, a checkpoint after every CheckpointEvery events, and,
// when why is not empty, a checkpoint at the end, with one write, then
// fsyncs. On failure the chain state is left unchanged.
func (w *writer) write(evs []Event, why string) error {
	seq, prev, since := w.seq, w.prev, w.sinceCk
	w.buf = w.buf[:0]
	now := w.l.opts.Now().UTC()
	var ckLine []byte
	checkpoint := func(reason string) error {
		seq++
		ck := Event{Seq: seq, Time: now, Kind: KindCheckpoint, Reason: reason, Prev: prev,
			PubKey: hex.EncodeToString(w.l.PublicKey())}
		ck.Sig = hex.EncodeToString(ed25519.Sign(w.l.opts.Key, checkpointMessage(ck.Seq, ck.Time, ck.Prev)))
		line, err := json.Marshal(ck)
		if err != nil {
			return fmt.Errorf("encode checkpoint: %w", err)
		}
		w.buf = append(append(w.buf, line...), '\n')
		prev, since, ckLine = Digest(line), 0, line
		return nil
	}
	for _, ev := range evs {
		seq++
		ev.Seq, ev.Prev = seq, prev
		if ev.Time.IsZero() {
			ev.Time = now
		}
		if ev.Kind == KindCheckpoint {
			return errors.New("callers cannot write checkpoints")
		}
		line, err := json.Marshal(ev)
		if err != nil {
			return fmt.Errorf("encode %s event: %w", ev.Kind, err)
		}
		w.buf = append(append(w.buf, line...), '\n')
		prev = Digest(line)
		if since++; since >= w.l.opts.CheckpointEvery {
			if err := checkpoint("periodic"); err != nil {
				return err
			}
		}
	}
	if why != "" && (since > 0 || ckLine == nil) {
		if err := checkpoint(why); err != nil {
			return err
		}
	}
	if len(w.buf) == 0 {
		return nil
	}
	if _, err := w.l.f.Write(w.buf); err != nil {
		return err
	}
	if err := w.l.f.Sync(); err != nil {
		return err
	}
	w.l.committed.Add(int64(len(w.buf)))
	w.seq, w.prev, w.sinceCk = seq, prev, since
	if ckLine != nil {
		w.lastCk = now
		if err := w.storeHead(ckLine); err != nil {
			w.l.opts.Logger.Error("store audit head", "err", err)
		}
	}
	return nil
}

// Head is the latest checkpoint, kept outside the log: Verify given it
// finds a log truncated past that checkpoint or with it edited.
type Head struct {
	Seq uint64 `json:"seq"`
	// Hash is the SHA-256 (hex) of the checkpoint line.
	Hash string `json:"hash"`
	// Line is the checkpoint line itself; its signature verifies it.
	Line json.RawMessage `json:"line"`
}

func (w *writer) storeHead(line []byte) error {
	if w.l.opts.HeadPath == "" {
		return nil
	}
	var ev Event
	if err := json.Unmarshal(line, &ev); err != nil {
		return err
	}
	b, err := json.Marshal(Head{Seq: ev.Seq, Hash: Digest(line), Line: line})
	if err != nil {
		return err
	}
	tmp := w.l.opts.HeadPath + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	f, err := os.Open(tmp)
	if err == nil {
		err = f.Sync()
		f.Close()
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, w.l.opts.HeadPath); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(w.l.opts.HeadPath)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// ReadHead reads a head file.
func ReadHead(path string) (Head, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Head{}, fmt.Errorf("read audit head: %w", err)
	}
	var h Head
	if err := json.Unmarshal(b, &h); err != nil {
		return Head{}, fmt.Errorf("read audit head %s: %w", path, err)
	}
	return h, nil
}
