package e2b

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// This file is envd's directory watching: WatchDir (a stream of events)
// and the polling watcher trio (CreateWatcher, GetWatcherEvents,
// RemoveWatcher). Both compare listings of the directory taken through
// the sandbox's file API (Options.WatchInterval apart for a stream, at each
// poll for a watcher), so they work on every driver and need nothing in
// the sandbox. What a listing cannot see is not reported: a file made and
// removed between two looks, and a rename, which shows as a remove and a
// create.

// maxWatched bounds the entries one watch compares.
const maxWatched = 10000

// Bounds of the polling watchers and of the WatchDir streams.
const (
	maxWatchersPerSandbox = 16
	// maxWatchStreams bounds one sandbox's open WatchDir streams: each
	// holds one of its key's in-flight calls while it lasts, and the key
	// keeps the others for its other calls. One past it is answered 429
	// at once, not left waiting (security review 2).
	maxWatchStreams = 8
	// watcherIdle drops a watcher nobody polled for this long.
	watcherIdle = 10 * time.Minute
)

// seen is what a listing says of one entry.
type seen struct {
	info sandbox.FileInfo
}

// snapshot lists dir (and, recursive, everything below it) by path
// relative to dir.
func snapshot(ctx context.Context, f sandbox.Files, dir string, recursive bool) (map[string]seen, error) {
	out := map[string]seen{}
	var walk func(d, rel string) error
	walk = func(d, rel string) error {
		ents, err := f.ReadDir(ctx, d)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if len(out) >= maxWatched {
				return fmt.Errorf("%w: more than %d entries under %s: watch a smaller directory, or not recursively", sandbox.ErrLimit, maxWatched, dir)
			}
			name := path.Join(rel, e.Name)
			out[name] = seen{info: e}
			if recursive && e.Type == "dir" {
				if err := walk(e.Path, name); err != nil && !errors.Is(err, fs.ErrPermission) && !errors.Is(err, sandbox.ErrNotFound) {
					return err
				}
			}
		}
		return nil
	}
	return out, walk(dir, "")
}

// diff lists what changed from before to after, by name.
func diff(before, after map[string]seen, withEntry bool) []fsEvent {
	var evs []fsEvent
	add := func(name, typ string, s seen) {
		ev := fsEvent{Name: name, Type: typ}
		if withEntry && typ != eventRemove {
			e := entry(s.info)
			ev.Entry = &e
		}
		evs = append(evs, ev)
	}
	for name, b := range before {
		a, ok := after[name]
		if !ok || a.info.Type != b.info.Type {
			add(name, eventRemove, b)
		}
	}
	for name, a := range after {
		b, ok := before[name]
		switch {
		case !ok || a.info.Type != b.info.Type:
			add(name, eventCreate, a)
		case a.info.Type != "dir" && (a.info.Size != b.info.Size || !a.info.ModTime.Equal(b.info.ModTime) || a.info.Target != b.info.Target):
			add(name, eventWrite, a)
		case a.info.Mode != b.info.Mode:
			add(name, eventChmod, a)
		}
	}
	// Removes first, then the rest by name: a replaced entry reads as
	// gone, then made.
	slices.SortStableFunc(evs, func(x, y fsEvent) int {
		if (x.Type == eventRemove) != (y.Type == eventRemove) {
			if x.Type == eventRemove {
				return -1
			}
			return 1
		}
		switch {
		case x.Name < y.Name:
			return -1
		case x.Name > y.Name:
			return 1
		}
		return 0
	})
	return evs
}

// watchedDir checks that p is a directory of the sandbox.
func watchedDir(ctx context.Context, f sandbox.Files, p string) error {
	fi, err := f.Stat(ctx, p)
	if err != nil {
		return err
	}
	if fi.Type != "dir" {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %q is not a directory", truncate(p, 200)))
	}
	return nil
}

func (h *Handler) watchDir(ctx context.Context, req *connect.Request[watchRequest], stream *connect.ServerStream[watchResponse]) error {
	p, err := absPath(ctx, req.Msg.Path)
	if err != nil {
		return err
	}
	f, done, _, err := h.files(ctx)
	if err != nil {
		return err
	}
	defer done()
	if err := watchedDir(ctx, f, p); err != nil {
		return h.rpcError(err)
	}
	prev, err := snapshot(ctx, f, p, req.Msg.Recursive)
	if err != nil {
		return h.rpcError(err)
	}
	var mu sync.Mutex
	send := func(r *watchResponse) error {
		mu.Lock()
		defer mu.Unlock()
		return stream.Send(r)
	}
	if err := send(&watchResponse{Start: &struct{}{}}); err != nil {
		return err
	}
	stop := h.keepalive(req.Header(), func() error { return send(&watchResponse{Keepalive: &struct{}{}}) })
	defer stop()
	tick := time.NewTicker(h.opts.WatchInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		cur, err := snapshot(ctx, f, p, req.Msg.Recursive)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, sandbox.ErrNotFound):
			return connect.NewError(connect.CodeNotFound, fmt.Errorf("the watched directory %s was removed", truncate(p, 200)))
		case err != nil:
			return h.rpcError(err)
		}
		for _, ev := range diff(prev, cur, req.Msg.IncludeEntry) {
			if err := send(&watchResponse{Filesystem: &ev}); err != nil {
				return err
			}
		}
		prev = cur
	}
}

// watcher is a polling watcher: the listing it last compared.
type watcher struct {
	sandbox   string
	path      string
	recursive bool
	entries   bool

	mu       sync.Mutex
	prev     map[string]seen
	lastPoll time.Time
}

type watchers struct {
	mu sync.Mutex
	by map[string]*watcher
}

// get returns sandbox sb's watcher id, after dropping idle ones.
func (ws *watchers) get(sb, id string) *watcher {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.pruneLocked()
	w := ws.by[id]
	if w == nil || w.sandbox != sb {
		return nil
	}
	return w
}

func (ws *watchers) pruneLocked() {
	for id, w := range ws.by {
		w.mu.Lock()
		idle := time.Since(w.lastPoll) > watcherIdle
		w.mu.Unlock()
		if idle {
			delete(ws.by, id)
		}
	}
}

func (ws *watchers) forgetSandbox(sb string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for id, w := range ws.by {
		if w.sandbox == sb {
			delete(ws.by, id)
		}
	}
}

func (h *Handler) createWatcher(ctx context.Context, req *connect.Request[watchRequest]) (*connect.Response[createWatcherResponse], error) {
	p, err := absPath(ctx, req.Msg.Path)
	if err != nil {
		return nil, err
	}
	f, done, t, err := h.files(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := watchedDir(ctx, f, p); err != nil {
		return nil, h.rpcError(err)
	}
	prev, err := snapshot(ctx, f, p, req.Msg.Recursive)
	if err != nil {
		return nil, h.rpcError(err)
	}
	w := &watcher{sandbox: t.info.ID, path: p, recursive: req.Msg.Recursive, entries: req.Msg.IncludeEntry, prev: prev, lastPoll: time.Now()}
	id := newToken()
	h.watches.mu.Lock()
	defer h.watches.mu.Unlock()
	h.watches.pruneLocked()
	n := 0
	for _, o := range h.watches.by {
		if o.sandbox == t.info.ID {
			n++
		}
	}
	if n >= maxWatchersPerSandbox {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("sandbox %s has %d watchers, the most it may have: remove one first", t.info.ID, n))
	}
	h.watches.by[id] = w
	return connect.NewResponse(&createWatcherResponse{WatcherID: id}), nil
}

func (h *Handler) watcherEvents(ctx context.Context, req *connect.Request[watcherRequest]) (*connect.Response[watcherEventsResponse], error) {
	t := targetOf(ctx)
	w := h.watches.get(t.info.ID, req.Msg.WatcherID)
	if w == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found: it was removed, or nobody polled it for %s", truncate(req.Msg.WatcherID, 80), watcherIdle))
	}
	f, done, _, err := h.files(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastPoll = time.Now()
	cur, err := snapshot(ctx, f, w.path, w.recursive)
	if err != nil {
		return nil, h.rpcError(err)
	}
	evs := diff(w.prev, cur, w.entries)
	w.prev = cur
	if evs == nil {
		evs = []fsEvent{}
	}
	return connect.NewResponse(&watcherEventsResponse{Events: evs}), nil
}

func (h *Handler) removeWatcher(ctx context.Context, req *connect.Request[watcherRequest]) (*connect.Response[empty], error) {
	t := targetOf(ctx)
	if h.watches.get(t.info.ID, req.Msg.WatcherID) == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found", truncate(req.Msg.WatcherID, 80)))
	}
	h.watches.mu.Lock()
	delete(h.watches.by, req.Msg.WatcherID)
	h.watches.mu.Unlock()
	return connect.NewResponse(&empty{}), nil
}

// watchStreams counts each sandbox's open WatchDir streams.
type watchStreams struct {
	mu sync.Mutex
	by map[string]int
}

// capWatches admits a WatchDir stream while its sandbox has fewer than
// maxWatchStreams open, and answers 429 (with Retry-After) otherwise,
// before the stream starts.
func (h *Handler) capWatches(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := targetOf(r.Context()).info.ID
		ws := &h.streams
		ws.mu.Lock()
		n := ws.by[id]
		if n >= maxWatchStreams {
			ws.mu.Unlock()
			w.Header().Set("Retry-After", "1")
			h.writeError(w, r, errorf(http.StatusTooManyRequests, "sandbox %s has %d directory watches open, the most it may have at once: end one (or use a polling watcher, CreateWatcher)", id, n))
			return
		}
		ws.by[id] = n + 1
		ws.mu.Unlock()
		defer func() {
			ws.mu.Lock()
			if ws.by[id]--; ws.by[id] <= 0 {
				delete(ws.by, id)
			}
			ws.mu.Unlock()
		}()
		next.ServeHTTP(w, r)
	})
}
