package agentdriver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Snapshots of an agent sandbox: the agent walks the trees and sends the
// content the host lacks; the host hashes what arrives itself and checks
// that every file of the snapshot is stored before it answers.

var _ sandbox.Snapshotter = (*Instance)(nil)

// agentGone is how long a failed restore waits to learn whether the
// sandbox died (then it says so).
const agentGone = 500 * time.Millisecond

// Capture captures the trees below req.Roots.
func (in *Instance) Capture(ctx context.Context, req sandbox.CaptureRequest, put sandbox.BlobPut) (sandbox.Capture, error) {
	if in.isDone() {
		return sandbox.Capture{}, in.endedError()
	}
	c, err := in.capture(ctx, req, put)
	if err != nil && in.isDone() {
		return sandbox.Capture{}, in.endedError()
	}
	return c, err
}

func (in *Instance) capture(ctx context.Context, req sandbox.CaptureRequest, put sandbox.BlobPut) (sandbox.Capture, error) {
	entries, unsettled, err := in.client.Scan(ctx, &agent.ScanRequest{Roots: req.Roots, MaxFiles: req.MaxFiles, MaxBytes: req.MaxBytes})
	if err != nil {
		return sandbox.Capture{}, fmt.Errorf("snapshot: %w", err)
	}
	if err := checkTree(req.Roots, entries); err != nil {
		return sandbox.Capture{}, fmt.Errorf("snapshot: the agent's answer: %w", err)
	}
	have := req.Have
	if have == nil {
		have = func(string) bool { return false }
	}
	out := sandbox.Capture{Entries: entries, Unsettled: unsettled}
	// Two rounds: a file that changed between the walk and its reading
	// comes back with a new digest, which the other paths that had its
	// old one do not share; they are read on their own.
	for round := 0; round < 2; round++ {
		var refs []agent.BlobRef
		var idx []int
		asked := map[string]bool{}
		for i, e := range out.Entries {
			if e.Type != sandbox.EntryFile || have(e.Digest) || (round == 0 && asked[e.Digest]) {
				continue
			}
			asked[e.Digest] = true
			refs = append(refs, agent.BlobRef{Path: e.Path, Digest: e.Digest})
			idx = append(idx, i)
		}
		if len(refs) == 0 {
			break
		}
		if err := in.readBlobs(ctx, refs, idx, &out, put); err != nil {
			return sandbox.Capture{}, err
		}
	}
	for _, e := range out.Entries {
		if e.Type == sandbox.EntryFile && !have(e.Digest) {
			return sandbox.Capture{}, fmt.Errorf("snapshot: %s kept changing while it was read; take the snapshot again when the command writing it is done: %w", e.Path, sandbox.ErrInvalid)
		}
	}
	slices.Sort(out.Unsettled)
	out.Unsettled = slices.Compact(out.Unsettled)
	return out, nil
}

// readBlobs reads the content of refs (entries idx of out) into put.
func (in *Instance) readBlobs(ctx context.Context, refs []agent.BlobRef, idx []int, out *sandbox.Capture, put sandbox.BlobPut) error {
	type result struct {
		digest string
		size   int64
		err    error
	}
	var pw *io.PipeWriter
	var res chan result
	start := func() {
		var pr *io.PipeReader
		pr, pw = io.Pipe()
		res = make(chan result, 1)
		go func() {
			d, n, err := put(ctx, pr)
			pr.CloseWithError(err)
			res <- result{d, n, err}
		}()
	}
	abandon := func() {
		if pw != nil {
			pw.CloseWithError(errors.New("abandoned"))
			<-res
			pw = nil
		}
	}
	defer abandon()
	write := func(i int, data []byte) error {
		if data == nil { // start over
			abandon()
		}
		if pw == nil {
			start()
		}
		if len(data) > 0 {
			if _, err := pw.Write(data); err != nil {
				r := <-res
				pw = nil
				return fmt.Errorf("snapshot: store %s: %w", refs[i].Path, r.err)
			}
		}
		return nil
	}
	end := func(i int, last *agent.BlobChunk) error {
		if pw == nil {
			start()
		}
		pw.Close()
		r := <-res
		pw = nil
		if r.err != nil {
			return fmt.Errorf("snapshot: store %s: %w", refs[i].Path, r.err)
		}
		if r.digest != last.Digest || r.size != last.Size {
			return fmt.Errorf("snapshot: the agent sent %s as %s (%d bytes) but the content is %s (%d bytes)", refs[i].Path, last.Digest, last.Size, r.digest, r.size)
		}
		e := &out.Entries[idx[i]]
		e.Digest, e.Size, e.MTime = r.digest, r.size, last.MTime
		out.SentFiles++
		out.SentBytes += r.size
		if last.Unsettled {
			out.Unsettled = append(out.Unsettled, e.Path)
		}
		return nil
	}
	if err := in.client.ReadBlobs(ctx, refs, write, end); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}

// checkTree checks what an agent said a tree holds.
func checkTree(roots []string, entries []sandbox.TreeEntry) error {
	for i, e := range entries {
		if err := e.Validate(roots); err != nil {
			return err
		}
		if i > 0 && entries[i-1].Path >= e.Path {
			return fmt.Errorf("entries not sorted at %q: %w", e.Path, sandbox.ErrInvalid)
		}
	}
	for _, r := range roots {
		if _, ok := slices.BinarySearchFunc(entries, r, func(e sandbox.TreeEntry, r string) int { return strings.Compare(e.Path, r) }); !ok {
			return fmt.Errorf("root %s missing: %w", r, sandbox.ErrInvalid)
		}
	}
	return nil
}

// Apply makes the trees exactly req.Entries.
func (in *Instance) Apply(ctx context.Context, req sandbox.ApplyRequest, get sandbox.BlobGet) (sandbox.ApplyStats, error) {
	if in.isDone() {
		return sandbox.ApplyStats{}, in.endedError()
	}
	st, err := in.client.Apply(ctx, req.Roots, req.Entries, get)
	if err != nil {
		if in.isDone() || in.waitDone(agentGone) {
			return sandbox.ApplyStats{}, fmt.Errorf("restore: %w", in.endedError())
		}
		return sandbox.ApplyStats{}, fmt.Errorf("restore: %w", err)
	}
	return st, nil
}
