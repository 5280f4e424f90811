package e2b

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// This file is the code interpreter's /contexts: each context is a Jupyter
// kernel in the sandbox, driven by a small bridge program (bridge.py) that
// the daemon starts as a background process of the sandbox and talks to
// through that process's standard input and output (execute.go). The
// kernel's sockets are files under /tmp inside the sandbox: no port is
// opened, and nothing reaches the kernel but through airlock. A context
// lives in its bridge's command line (its id, language and working
// directory), so the daemon finds its contexts again in the sandbox's
// process list.

//go:embed bridge.py
var bridgeSource string

// bridgeMarker is the bridge's first argument, how its processes are
// recognised.
const bridgeMarker = "airlock-interpreter"

// defaultContext is the id of the context a run without one uses.
const defaultContext = "default"

// maxContexts bounds the contexts (kernels) of one sandbox.
const maxContexts = 8

// kernelStartTimeout bounds a kernel's start.
const kernelStartTimeout = 90 * time.Second

// isBridge says whether argv is an interpreter bridge's.
func isBridge(argv []string) bool {
	return len(argv) >= 4 && argv[1] == "-c" && argv[3] == bridgeMarker
}

func bridgeArgv(k *kernel) []string {
	return []string{"python3", "-c", bridgeSource, bridgeMarker, k.id, k.language, k.cwd}
}

// kernel is a context: its bridge process and where in the bridge's
// output the next run's lines start.
type kernel struct {
	id, language, cwd string
	// sem is held by whoever runs a cell or starts, restarts or removes
	// the kernel: one at a time, as a kernel runs one cell at a time.
	sem chan struct{}
	// Guarded by sem.
	pid string // the bridge's process id; "" before it starts
	off int64  // its stdout offset after the last line read
}

func newKernel(id, language, cwd string) *kernel {
	return &kernel{id: id, language: language, cwd: cwd, sem: make(chan struct{}, 1)}
}

// lock takes k's semaphore, or fails when ctx ends first.
func (k *kernel) lock(ctx context.Context) error {
	select {
	case k.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (k *kernel) unlock() { <-k.sem }

// kernels are the contexts of every sandbox the handler has served.
type kernels struct {
	mu sync.Mutex
	by map[string]*sandboxKernels
}

type sandboxKernels struct {
	mu      sync.Mutex
	adopted bool
	ctxs    map[string]*kernel
}

func (ks *kernels) forget(id string) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	delete(ks.by, id)
}

// contexts returns sandbox t's contexts, finding the ones whose bridges
// run already (started by an earlier daemon, say) the first time.
func (h *Handler) contexts(ctx context.Context, t *target) (*sandboxKernels, error) {
	h.kernels.mu.Lock()
	sk := h.kernels.by[t.info.ID]
	if sk == nil {
		// Drop what ended sandboxes left.
		for id := range h.kernels.by {
			if info, err := h.sup.Sandbox(ctx, id); err != nil || info.State != store.StateRunning {
				delete(h.kernels.by, id)
			}
		}
		sk = &sandboxKernels{ctxs: map[string]*kernel{}}
		h.kernels.by[t.info.ID] = sk
	}
	h.kernels.mu.Unlock()
	sk.mu.Lock()
	defer sk.mu.Unlock()
	if sk.adopted {
		return sk, nil
	}
	ps, err := h.sup.Processes(ctx, t.c.sup, t.info.ID)
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		if !p.Running || !isBridge(p.Argv) || len(p.Argv) < 7 {
			continue
		}
		out, err := h.sup.Output(ctx, t.c.sup, t.info.ID, p.ID, supervisor.Offsets{Now: true})
		if err != nil {
			continue
		}
		k := newKernel(p.Argv[4], p.Argv[5], p.Argv[6])
		k.pid, k.off = p.ID, out.StdoutOffset
		sk.ctxs[k.id] = k
	}
	sk.adopted = true
	return sk, nil
}

// context returns context id of t (the default one is made on demand).
func (h *Handler) context(ctx context.Context, t *target, id string) (*kernel, error) {
	sk, err := h.contexts(ctx, t)
	if err != nil {
		return nil, err
	}
	sk.mu.Lock()
	defer sk.mu.Unlock()
	k := sk.ctxs[id]
	if k == nil && id == defaultContext {
		k = newKernel(defaultContext, "python", t.home())
		sk.ctxs[id] = k
	}
	if k == nil {
		return nil, errorf(http.StatusNotFound, "context %q not found: create it with createCodeContext, or leave it out for the default one", truncate(id, 80))
	}
	return k, nil
}

// bridgeLine is one line of a bridge's output.
type bridgeLine struct {
	Ready bool   `json:"ready"`
	Fatal string `json:"fatal"`

	ID        string                     `json:"id"`
	Type      string                     `json:"type"`
	Text      string                     `json:"text"`
	Main      bool                       `json:"main"`
	Data      map[string]json.RawMessage `json:"data"`
	Name      string                     `json:"name"`
	Value     string                     `json:"value"`
	Traceback string                     `json:"traceback"`
	N         int                        `json:"n"`
}

// startKernel starts k's bridge and waits until its kernel is ready.
// k.sem is held.
func (h *Handler) startKernel(ctx context.Context, t *target, k *kernel) error {
	p, err := h.sup.StartProcess(ctx, t.c.sup, t.info.ID, supervisor.StartRequest{
		ExecRequest:   supervisor.ExecRequest{Argv: bridgeArgv(k), Dir: k.cwd},
		KeepStdinOpen: true,
	})
	if err != nil {
		return err
	}
	k.pid, k.off = p.ID, 0
	sctx, cancel := context.WithTimeout(ctx, kernelStartTimeout)
	defer cancel()
	var lr lineReader
	var fatal string
	ready := errors.New("ready")
	info, err := h.sup.Follow(sctx, t.c.sup, t.info.ID, p.ID, supervisor.Offsets{}, nil, func(o supervisor.OutputEvent) error {
		if o.Stream != supervisor.StreamStdout {
			return nil
		}
		return lr.feed(o, func(line []byte, end int64) error {
			var bl bridgeLine
			if json.Unmarshal(line, &bl) != nil {
				return nil
			}
			switch {
			case bl.Ready:
				k.off = end
				return ready
			case bl.Fatal != "":
				fatal = bl.Fatal
			}
			return nil
		})
	})
	if errors.Is(err, ready) {
		return nil
	}
	h.killKernel(context.WithoutCancel(ctx), t, k)
	switch {
	case fatal != "":
		if strings.Contains(fatal, "ModuleNotFoundError") || strings.Contains(fatal, "No such kernel") {
			return errorf(http.StatusNotImplemented, "this sandbox has no Jupyter kernel (%s): the daemon's host needs python3-ipykernel and python3-jupyter-client (make deps), or the template's root needs them", truncate(fatal, 300))
		}
		return errorf(http.StatusInternalServerError, "the Jupyter kernel did not start: %s", truncate(fatal, 500))
	case err == nil:
		return errorf(http.StatusInternalServerError, "the interpreter ended before its kernel was ready: %s", resultText(info.Result))
	case sctx.Err() != nil && ctx.Err() == nil:
		return errorf(http.StatusGatewayTimeout, "the Jupyter kernel was not ready within %s", kernelStartTimeout)
	}
	return err
}

// ensure starts k's bridge unless it runs. k.sem is held.
func (h *Handler) ensure(ctx context.Context, t *target, k *kernel) error {
	if k.pid != "" {
		out, err := h.sup.Output(ctx, t.c.sup, t.info.ID, k.pid, supervisor.Offsets{Now: true})
		if err == nil && out.Running {
			return nil
		}
	}
	return h.startKernel(ctx, t, k)
}

// killKernel ends k's bridge and its kernel. k.sem is held.
func (h *Handler) killKernel(ctx context.Context, t *target, k *kernel) {
	if k.pid == "" {
		return
	}
	_ = h.sup.Signal(ctx, t.c.sup, t.info.ID, k.pid, syscall.SIGKILL)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, _ = h.sup.Wait(wctx, t.c.sup, t.info.ID, k.pid)
	k.pid, k.off = "", 0
}

// resultText says how a process ended, for an error message.
func resultText(res *sandbox.Result) string {
	if res == nil {
		return "it was lost"
	}
	if res.Message != "" {
		return res.Message
	}
	return fmt.Sprintf("exit code %d", res.ExitCode)
}

// warmKernel starts the default context of a sandbox just made, in the
// background, so that its first run finds the kernel ready.
func (h *Handler) warmKernel(c *caller, id string) {
	h.bg.Add(1)
	go func() {
		defer h.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), kernelStartTimeout)
		defer cancel()
		go func() {
			select {
			case <-h.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		info, err := h.sup.Get(ctx, c.sup, id)
		if err != nil {
			return
		}
		t := &target{info: info, c: c}
		k, err := h.context(ctx, t, defaultContext)
		if err != nil || k.lock(ctx) != nil {
			return
		}
		defer k.unlock()
		if err := h.ensure(ctx, t, k); err != nil {
			h.log.Warn("e2b: start the default kernel", "sandbox_id", id, "err", err)
		}
	}()
}

func (h *Handler) routeInterpreter() {
	m := h.interp
	m.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, "OK") })
	m.HandleFunc("POST /execute", h.withTarget(h.execute))
	m.HandleFunc("POST /contexts", h.withTarget(h.createContext))
	m.HandleFunc("GET /contexts", h.withTarget(h.listContexts))
	m.HandleFunc("POST /contexts/{id}/restart", h.withTarget(h.restartContext))
	m.HandleFunc("DELETE /contexts/{id}", h.withTarget(h.removeContext))
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.writeError(w, r, errorf(http.StatusNotFound, "the code interpreter has no route %s %s", r.Method, truncate(r.URL.Path, 200)))
	})
}

// contextJSON is a context as the SDKs read it.
type contextJSON struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// checkLanguage refuses what the interpreter cannot run.
func checkLanguage(l string) (string, error) {
	switch strings.ToLower(l) {
	case "", "python", "python3":
		return "python", nil
	}
	return "", errorf(http.StatusBadRequest, "language %q: airlock's interpreter runs Python; run other languages with commands.run", truncate(l, 40))
}

func (h *Handler) createContext(w http.ResponseWriter, r *http.Request, t *target) error {
	var body struct {
		Language string `json:"language"`
		Cwd      string `json:"cwd"`
	}
	if err := decode(w, r, &body); err != nil {
		return err
	}
	lang, err := checkLanguage(body.Language)
	if err != nil {
		return err
	}
	cwd := t.home()
	if body.Cwd != "" {
		c, err := h.cwd(r.Context(), t, body.Cwd)
		if err != nil {
			return errorf(http.StatusBadRequest, "cwd %q is not a directory of the sandbox: create it first", truncate(body.Cwd, 200))
		}
		cwd = path.Clean(c)
	}
	sk, err := h.contexts(r.Context(), t)
	if err != nil {
		return err
	}
	k := newKernel(newToken(), lang, cwd)
	sk.mu.Lock()
	if len(sk.ctxs) >= maxContexts {
		sk.mu.Unlock()
		return errorf(http.StatusTooManyRequests, "sandbox %s has %d code contexts, the most it may have: remove one first", t.info.ID, len(sk.ctxs))
	}
	sk.ctxs[k.id] = k
	sk.mu.Unlock()
	if err := k.lock(r.Context()); err != nil {
		return err
	}
	defer k.unlock()
	if err := h.startKernel(r.Context(), t, k); err != nil {
		sk.mu.Lock()
		delete(sk.ctxs, k.id)
		sk.mu.Unlock()
		return err
	}
	writeJSON(w, http.StatusOK, contextJSON{ID: k.id, Language: k.language, Cwd: k.cwd})
	return nil
}

func (h *Handler) listContexts(w http.ResponseWriter, r *http.Request, t *target) error {
	sk, err := h.contexts(r.Context(), t)
	if err != nil {
		return err
	}
	sk.mu.Lock()
	out := make([]contextJSON, 0, len(sk.ctxs))
	for _, k := range sk.ctxs {
		out = append(out, contextJSON{ID: k.id, Language: k.language, Cwd: k.cwd})
	}
	sk.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) restartContext(w http.ResponseWriter, r *http.Request, t *target) error {
	k, err := h.context(r.Context(), t, r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := k.lock(r.Context()); err != nil {
		return err
	}
	defer k.unlock()
	h.killKernel(r.Context(), t, k)
	if err := h.startKernel(r.Context(), t, k); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) removeContext(w http.ResponseWriter, r *http.Request, t *target) error {
	id := r.PathValue("id")
	k, err := h.context(r.Context(), t, id)
	if err != nil {
		return err
	}
	if err := k.lock(r.Context()); err != nil {
		return err
	}
	defer k.unlock()
	h.killKernel(r.Context(), t, k)
	sk, err := h.contexts(r.Context(), t)
	if err != nil {
		return err
	}
	sk.mu.Lock()
	delete(sk.ctxs, id)
	sk.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
	return nil
}
