package client

import (
	"context"
	"io"
	"net/url"
	"strconv"
	"time"
)

// Snapshot describes a snapshot of a sandbox's /workspace (and /tmp when
// asked): its files, directories, symlinks and modes. Running processes
// are not part of a snapshot.
type Snapshot struct {
	ID       string    `json:"id"`
	Name     string    `json:"name,omitempty"`
	Label    string    `json:"label,omitempty"`
	Owner    string    `json:"owner"`
	Sandbox  string    `json:"sandbox"`
	Template string    `json:"template"`
	Driver   string    `json:"driver,omitempty"`
	Kind     string    `json:"kind"` // manual, checkpoint or pre_exec
	Step     int64     `json:"step,omitempty"`
	Created  time.Time `json:"created"`
	Roots    []string  `json:"roots"`
	Files    int       `json:"files"`
	Entries  int       `json:"entries"`
	Bytes    int64     `json:"bytes"`
	// NewBytes is the content this snapshot added to the daemon's store.
	NewBytes int64 `json:"new_bytes"`
	// Busy: commands ran while it was taken (each file is as it was at
	// one moment, not all files at the same moment).
	Busy      bool     `json:"busy,omitempty"`
	Unsettled []string `json:"unsettled,omitempty"`
	Note      string   `json:"note,omitempty"`
	// Tree is set by GetSnapshot with its tree.
	Tree []TreeEntry `json:"tree,omitempty"`
}

// TreeEntry is one file, directory or symlink of a snapshot.
type TreeEntry struct {
	Path   string `json:"path"`
	Type   string `json:"type"` // file, dir or symlink
	Mode   uint32 `json:"mode"`
	Size   int64  `json:"size,omitempty"`
	Digest string `json:"digest,omitempty"`
	Target string `json:"target,omitempty"`
	MTime  int64  `json:"mtime,omitempty"`
}

// SnapshotRequest asks for a snapshot.
type SnapshotRequest struct {
	// Name is unique among the sandbox's snapshots: letters, digits, '.',
	// '_' and '-'. Empty: none.
	Name       string `json:"name,omitempty"`
	Label      string `json:"label,omitempty"`
	IncludeTmp bool   `json:"include_tmp,omitempty"`
}

// Snapshot snapshots sandbox id's files.
func (c *Client) Snapshot(ctx context.Context, id string, req SnapshotRequest) (*Snapshot, error) {
	var s Snapshot
	return &s, c.call(ctx, request{method: "POST", path: sandboxPath(id, "snapshots"), json: req}, &s)
}

// ListSnapshots lists sandbox id's snapshots, or, with id empty, every
// snapshot of this key, oldest first.
func (c *Client) ListSnapshots(ctx context.Context, id string) ([]Snapshot, error) {
	var out struct {
		Snapshots []Snapshot `json:"snapshots"`
	}
	path := "/v1/snapshots"
	if id != "" {
		path = sandboxPath(id, "snapshots")
	}
	err := c.call(ctx, request{method: "GET", path: path}, &out)
	return out.Snapshots, err
}

// snapshotPath is the path of snapshot ref: an id, or (with sandbox set)
// a name among that sandbox's snapshots.
func snapshotPath(sandbox, ref string, rest ...string) string {
	p := "/v1/snapshots/" + url.PathEscape(ref)
	if sandbox != "" {
		p = sandboxPath(sandbox, "snapshots", url.PathEscape(ref))
	}
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// GetSnapshot describes snapshot ref (an id; or a name of sandbox's
// snapshots when sandbox is set); with tree, its entries too.
func (c *Client) GetSnapshot(ctx context.Context, sandbox, ref string, tree bool) (*Snapshot, error) {
	var s Snapshot
	q := url.Values{}
	if tree {
		q.Set("tree", "1")
	}
	return &s, c.call(ctx, request{method: "GET", path: snapshotPath(sandbox, ref), query: q}, &s)
}

// DeleteSnapshot deletes snapshot ref (see GetSnapshot).
func (c *Client) DeleteSnapshot(ctx context.Context, sandbox, ref string) error {
	return c.call(ctx, request{method: "DELETE", path: snapshotPath(sandbox, ref)}, nil)
}

// RestoreRequest says what to restore: a snapshot (id or name), or the
// state before the last UndoSteps commands (a sandbox with checkpoints).
type RestoreRequest struct {
	Snapshot  string `json:"snapshot,omitempty"`
	UndoSteps int    `json:"undo_steps,omitempty"`
}

// ApplyStats say what a restore changed.
type ApplyStats struct {
	Added         int   `json:"added"`
	Changed       int   `json:"changed"`
	Removed       int   `json:"removed"`
	ReceivedBytes int64 `json:"received_bytes"`
}

// RestoreResult is the snapshot restored and what changed.
type RestoreResult struct {
	Snapshot Snapshot `json:"snapshot"`
	ApplyStats
}

// Restore makes sandbox id's files exactly a snapshot's: files added
// since are removed, changed ones reverted, modes and symlinks kept. It
// is all or nothing. Running processes go on running.
func (c *Client) Restore(ctx context.Context, id string, req RestoreRequest) (*RestoreResult, error) {
	var r RestoreResult
	return &r, c.call(ctx, request{method: "POST", path: sandboxPath(id, "restore"), json: req}, &r)
}

// DiffOptions say what Diff compares: From and To are snapshot ids or
// names, or "now"; empty From is the sandbox's latest snapshot, empty To
// is now. Step compares checkpoint step-N with the next (what command N
// changed).
type DiffOptions struct {
	From, To string
	Step     int64
	// MaxFileDiffBytes caps each file's unified diff (default 64 KiB).
	MaxFileDiffBytes int
}

func (o DiffOptions) query() url.Values {
	q := url.Values{}
	if o.From != "" {
		q.Set("from", o.From)
	}
	if o.To != "" {
		q.Set("to", o.To)
	}
	if o.Step > 0 {
		q.Set("step", strconv.FormatInt(o.Step, 10))
	}
	if o.MaxFileDiffBytes > 0 {
		q.Set("max_file_diff_bytes", strconv.Itoa(o.MaxFileDiffBytes))
	}
	return q
}

// Change is one path that differs.
type Change struct {
	Path string `json:"path"`
	// Kind is added, deleted, modified, mode, symlink or type.
	Kind   string     `json:"kind"`
	Before *TreeEntry `json:"before,omitempty"`
	After  *TreeEntry `json:"after,omitempty"`
	Binary bool       `json:"binary,omitempty"`
	// Unified is the unified diff of a text file, capped (Truncated).
	Unified   string `json:"unified,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
}

// Diff is what changed from one state to another.
type Diff struct {
	From      string   `json:"from"`
	To        string   `json:"to"`
	Changes   []Change `json:"changes"`
	Added     int      `json:"added"`
	Deleted   int      `json:"deleted"`
	Modified  int      `json:"modified"`
	Other     int      `json:"other"`
	Truncated bool     `json:"truncated,omitempty"`
}

// Diff compares two states of sandbox id's files.
func (c *Client) Diff(ctx context.Context, id string, o DiffOptions) (*Diff, error) {
	var d Diff
	return &d, c.call(ctx, request{method: "GET", path: sandboxPath(id, "diff"), query: o.query()}, &d)
}

// DiffText is Diff as text for people: one line per change, then the
// unified diffs.
func (c *Client) DiffText(ctx context.Context, id string, o DiffOptions) (string, error) {
	q := o.query()
	q.Set("format", "text")
	resp, err := c.do(ctx, request{method: "GET", path: sandboxPath(id, "diff"), query: q})
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	return string(b), err
}

// ForkRequest asks for a new sandbox from a snapshot.
type ForkRequest struct {
	// Sandbox is where a snapshot name is looked up; empty for an id.
	Sandbox string
	// TTL is the new sandbox's lifetime; zero means the template's.
	TTL time.Duration
	Env map[string]string
}

// ForkResult is the new sandbox, the snapshot and what its restore did.
type ForkResult struct {
	Sandbox  Sandbox  `json:"sandbox"`
	Snapshot Snapshot `json:"snapshot"`
	ApplyStats
}

// Fork makes a new sandbox from snapshot ref: the same template, its own
// identity, the snapshot's files.
func (c *Client) Fork(ctx context.Context, ref string, req ForkRequest) (*ForkResult, error) {
	body := struct {
		Sandbox    string            `json:"sandbox,omitempty"`
		TTLSeconds int64             `json:"ttl_seconds,omitempty"`
		Env        map[string]string `json:"env,omitempty"`
	}{req.Sandbox, ceilSeconds(req.TTL), req.Env}
	var r ForkResult
	return &r, c.call(ctx, request{method: "POST", path: snapshotPath("", ref, "fork"), json: body}, &r)
}
