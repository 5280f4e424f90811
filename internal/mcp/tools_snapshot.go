package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// The snapshot tools: sandbox_snapshot, sandbox_snapshot_list,
// sandbox_restore, sandbox_diff, sandbox_fork.

// SnapshotInput is the input of sandbox_snapshot.
type SnapshotInput struct {
	Name       string `json:"name,omitempty" jsonschema:"a name for it, unique in the sandbox (letters, digits, . _ -), to restore or diff it by"`
	Label      string `json:"label,omitempty" jsonschema:"free text kept with it"`
	IncludeTmp bool   `json:"include_tmp,omitempty" jsonschema:"snapshot /tmp too (default: /workspace only)"`
	SandboxID  string `json:"sandbox_id,omitempty" jsonschema:"the sandbox (default: this session's own)"`
}

// SnapshotEntry describes a snapshot.
type SnapshotEntry struct {
	SnapshotID string    `json:"snapshot_id"`
	Name       string    `json:"name,omitempty"`
	Label      string    `json:"label,omitempty"`
	SandboxID  string    `json:"sandbox_id"`
	Kind       string    `json:"kind" jsonschema:"manual, checkpoint (taken before each command of a sandbox with checkpoints) or pre_exec"`
	Step       int64     `json:"step,omitempty"`
	Files      int       `json:"files"`
	Bytes      int64     `json:"bytes"`
	Created    time.Time `json:"created"`
	Note       string    `json:"note,omitempty"`
}

func snapEntry(in SnapshotInfo) SnapshotEntry {
	return SnapshotEntry{SnapshotID: in.ID, Name: in.Name, Label: in.Label, SandboxID: in.Sandbox, Kind: in.Kind, Step: in.Step, Files: in.Files, Bytes: in.Bytes, Created: in.Created, Note: in.Note}
}

// SnapshotListOutput is the result of sandbox_snapshot_list.
type SnapshotListOutput struct {
	Snapshots []SnapshotEntry `json:"snapshots"`
}

// RestoreInput is the input of sandbox_restore.
type RestoreInput struct {
	Snapshot  string `json:"snapshot,omitempty" jsonschema:"the snapshot's id (sn-…) or name"`
	UndoSteps int    `json:"undo_steps,omitempty" jsonschema:"instead of a snapshot: undo the last this many commands (a sandbox with checkpoints)"`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox (default: this session's own)"`
}

// RestoreOutput says what a restore did.
type RestoreOutput struct {
	SandboxID  string `json:"sandbox_id"`
	SnapshotID string `json:"snapshot_id"`
	Added      int    `json:"added" jsonschema:"files the restore made again"`
	Changed    int    `json:"changed"`
	Removed    int    `json:"removed" jsonschema:"files added since the snapshot, removed"`
}

// DiffInput is the input of sandbox_diff.
type DiffInput struct {
	From      string `json:"from,omitempty" jsonschema:"snapshot id or name, or now (default: the sandbox's latest snapshot)"`
	To        string `json:"to,omitempty" jsonschema:"snapshot id or name, or now (the default)"`
	Step      int64  `json:"step,omitempty" jsonschema:"instead of from and to: what command number step changed (a sandbox with checkpoints)"`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox (default: this session's own)"`
}

// DiffOutput is the structured result of sandbox_diff.
type DiffOutput struct {
	SandboxID string            `json:"sandbox_id"`
	From      string            `json:"from"`
	To        string            `json:"to"`
	Added     int               `json:"added"`
	Deleted   int               `json:"deleted"`
	Modified  int               `json:"modified"`
	Other     int               `json:"other" jsonschema:"mode, symlink and type changes"`
	Changes   []snapshot.Change `json:"changes"`
	Truncated bool              `json:"truncated,omitempty"`
}

// ForkInput is the input of sandbox_fork.
type ForkInput struct {
	Snapshot  string  `json:"snapshot" jsonschema:"the snapshot's id (sn-…), or its name with sandbox_id"`
	SandboxID string  `json:"sandbox_id,omitempty" jsonschema:"the sandbox whose snapshot name is given (default: this session's own)"`
	TimeoutS  float64 `json:"timeout_s,omitempty" jsonschema:"the new sandbox's lifetime in seconds (default: the template's)"`
}

func (s *Server) addSnapshotTools() {
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "sandbox_snapshot",
		Title:       "Snapshot a sandbox's files",
		Description: "Save the sandbox's /workspace (and /tmp with include_tmp): files, directories, symlinks, modes. Running processes are not saved. Cheap: unchanged files are stored once. Restore it with sandbox_restore, compare with sandbox_diff, start a new sandbox from it with sandbox_fork.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
	}, s.sandboxSnapshot)
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "sandbox_snapshot_list",
		Title:       "List a sandbox's snapshots",
		Description: "List the snapshots of a sandbox, oldest first: manual ones, and the checkpoints of a sandbox that keeps them.",
		Annotations: readOnly,
	}, s.sandboxSnapshotList)
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "sandbox_restore",
		Title:       "Restore a sandbox's files",
		Description: "Make /workspace exactly a snapshot again: files added since are removed, changed ones reverted, modes and symlinks put back; all or nothing. Or undo the last undo_steps commands of a sandbox with checkpoints. Running processes keep running.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, s.sandboxRestore)
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "sandbox_diff",
		Title:       "Show what changed in a sandbox's files",
		Description: "Compare two snapshots, or a snapshot and now (default: the latest snapshot and now), or what one command changed (step): added, deleted, modified, mode and symlink changes, with unified diffs of text files (capped); binary files are marked.",
		Annotations: readOnly,
	}, s.sandboxDiff)
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "sandbox_fork",
		Title:       "Start a sandbox from a snapshot",
		Description: "Make a new sandbox from a snapshot: the same template, its own identity, the snapshot's files. Returns its sandbox_id; pass it to other tools to use it.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
	}, s.sandboxFork)
}

func (s *Server) sandboxSnapshot(ctx context.Context, req *sdk.CallToolRequest, in SnapshotInput) (*sdk.CallToolResult, SnapshotEntry, error) {
	t, err := s.resolve(ctx, req, in.SandboxID)
	if err != nil {
		return nil, SnapshotEntry{}, s.fail(t, err)
	}
	info, err := t.b.Snapshot(ctx, t.id, SnapshotRequest{Name: in.Name, Label: in.Label, IncludeTmp: in.IncludeTmp})
	if err != nil {
		return nil, SnapshotEntry{}, s.fail(t, err)
	}
	e := snapEntry(info)
	text := fmt.Sprintf("snapshot %s of sandbox %s: %d files, %d bytes (%s)", e.SnapshotID, t.id, e.Files, e.Bytes, e.Note)
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}}, e, nil
}

func (s *Server) sandboxSnapshotList(ctx context.Context, req *sdk.CallToolRequest, in SandboxIDInput) (*sdk.CallToolResult, SnapshotListOutput, error) {
	t, err := s.resolve(ctx, req, in.SandboxID)
	if err != nil {
		return nil, SnapshotListOutput{}, s.fail(t, err)
	}
	list, err := t.b.Snapshots(ctx, t.id)
	if err != nil {
		return nil, SnapshotListOutput{}, s.fail(t, err)
	}
	out := SnapshotListOutput{Snapshots: []SnapshotEntry{}}
	for _, in := range list {
		out.Snapshots = append(out.Snapshots, snapEntry(in))
	}
	return nil, out, nil
}

func (s *Server) sandboxRestore(ctx context.Context, req *sdk.CallToolRequest, in RestoreInput) (*sdk.CallToolResult, RestoreOutput, error) {
	if (in.Snapshot == "") == (in.UndoSteps == 0) || in.UndoSteps < 0 {
		return nil, RestoreOutput{}, toolError("give snapshot (an id or name) or undo_steps (a positive number), one of them")
	}
	t, err := s.resolve(ctx, req, in.SandboxID)
	if err != nil {
		return nil, RestoreOutput{}, s.fail(t, err)
	}
	r, err := t.b.Restore(ctx, t.id, in.Snapshot, in.UndoSteps)
	if err != nil {
		return nil, RestoreOutput{}, s.fail(t, err)
	}
	out := RestoreOutput{SandboxID: t.id, SnapshotID: r.Snapshot, Added: r.Added, Changed: r.Changed, Removed: r.Removed}
	text := fmt.Sprintf("sandbox %s restored to snapshot %s: %d files made again, %d changed back, %d removed", t.id, r.Snapshot, r.Added, r.Changed, r.Removed)
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}}, out, nil
}

func (s *Server) sandboxDiff(ctx context.Context, req *sdk.CallToolRequest, in DiffInput) (*sdk.CallToolResult, DiffOutput, error) {
	if in.Step < 0 {
		return nil, DiffOutput{}, toolError("step must be a positive command number")
	}
	t, err := s.resolve(ctx, req, in.SandboxID)
	if err != nil {
		return nil, DiffOutput{}, s.fail(t, err)
	}
	d, err := t.b.Diff(ctx, t.id, in.From, in.To, in.Step)
	if err != nil {
		return nil, DiffOutput{}, s.fail(t, err)
	}
	out := DiffOutput{SandboxID: t.id, From: d.From, To: d.To, Added: d.Added, Deleted: d.Deleted, Modified: d.Modified, Other: d.Other, Changes: d.Changes, Truncated: d.Truncated}
	// The paths and the content are the sandbox's: framed as data.
	txt := []byte(d.Text())
	f := newFramer(txt)
	var b strings.Builder
	fmt.Fprintf(&b, "diff of sandbox %s from %s to %s: %d added, %d deleted, %d modified, %d other\n", t.id, d.From, d.To, d.Added, d.Deleted, d.Modified, d.Other)
	b.WriteString(f.note() + "\n")
	f.frame(&b, "diff", txt, false)
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: b.String()}}}, out, nil
}

func (s *Server) sandboxFork(ctx context.Context, req *sdk.CallToolRequest, in ForkInput) (*sdk.CallToolResult, SandboxEntry, error) {
	if in.Snapshot == "" {
		return nil, SandboxEntry{}, toolError("snapshot is required: an id (sn-…), or a name with sandbox_id")
	}
	ttl, err := seconds("timeout_s", in.TimeoutS)
	if err != nil {
		return nil, SandboxEntry{}, err
	}
	var t target
	if snapshot.ValidID(in.Snapshot) && in.SandboxID == "" {
		b, err := s.opts.Backend(ctx, req)
		if err != nil {
			return nil, SandboxEntry{}, s.fail(target{}, err)
		}
		t = target{b: b}
	} else if t, err = s.resolve(ctx, req, in.SandboxID); err != nil {
		return nil, SandboxEntry{}, s.fail(t, err)
	}
	info, err := t.b.Fork(ctx, t.id, in.Snapshot, ttl)
	if err != nil {
		return nil, SandboxEntry{}, s.fail(t, err)
	}
	text := fmt.Sprintf("sandbox %s made from snapshot %s; pass sandbox_id %q to other tools to use it", info.ID, in.Snapshot, info.ID)
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}}, entry(info), nil
}

// The Local backend's snapshot calls.

func localSnap(in snapshot.Info) SnapshotInfo {
	return SnapshotInfo{ID: in.ID, Name: in.Name, Label: in.Label, Sandbox: in.Sandbox, Kind: in.Kind, Step: in.Step, Files: in.Files, Bytes: in.Bytes, Created: in.Created, Note: in.Note}
}

// Snapshot snapshots a sandbox's files.
func (l *Local) Snapshot(ctx context.Context, id string, req SnapshotRequest) (SnapshotInfo, error) {
	in, err := l.Sup.Snapshot(ctx, l.Caller, id, supervisor.SnapshotRequest{Name: req.Name, Label: req.Label, IncludeTmp: req.IncludeTmp})
	return localSnap(in), err
}

// Snapshots lists a sandbox's snapshots.
func (l *Local) Snapshots(ctx context.Context, id string) ([]SnapshotInfo, error) {
	list, err := l.Sup.ListSnapshots(ctx, l.Caller, id)
	out := make([]SnapshotInfo, 0, len(list))
	for _, in := range list {
		out = append(out, localSnap(in))
	}
	return out, err
}

// Restore restores a sandbox's files.
func (l *Local) Restore(ctx context.Context, id, ref string, undo int) (RestoreInfo, error) {
	r, err := l.Sup.Restore(ctx, l.Caller, id, supervisor.RestoreRequest{Snapshot: ref, UndoSteps: undo})
	return RestoreInfo{Snapshot: r.Snapshot.ID, Added: r.Stats.Added, Changed: r.Stats.Changed, Removed: r.Stats.Removed}, err
}

// Diff compares two states of a sandbox's files.
func (l *Local) Diff(ctx context.Context, id, from, to string, step int64) (*snapshot.Diff, error) {
	return l.Sup.Diff(ctx, l.Caller, id, supervisor.DiffRequest{From: from, To: to, Step: step})
}

// Fork makes a sandbox from a snapshot.
func (l *Local) Fork(ctx context.Context, id, ref string, ttl time.Duration) (SandboxInfo, error) {
	r, err := l.Sup.Fork(ctx, l.Caller, supervisor.ForkRequest{Sandbox: id, Snapshot: ref, TTL: ttl})
	if err != nil {
		return SandboxInfo{}, err
	}
	return localInfo(r.Sandbox), nil
}

// The Remote backend's snapshot calls.

func remoteSnap(s *client.Snapshot) SnapshotInfo {
	return SnapshotInfo{ID: s.ID, Name: s.Name, Label: s.Label, Sandbox: s.Sandbox, Kind: s.Kind, Step: s.Step, Files: s.Files, Bytes: s.Bytes, Created: s.Created, Note: s.Note}
}

// Snapshot snapshots a sandbox's files.
func (r *Remote) Snapshot(ctx context.Context, id string, req SnapshotRequest) (SnapshotInfo, error) {
	s, err := r.C.Snapshot(ctx, id, client.SnapshotRequest{Name: req.Name, Label: req.Label, IncludeTmp: req.IncludeTmp})
	if err != nil {
		return SnapshotInfo{}, err
	}
	return remoteSnap(s), nil
}

// Snapshots lists a sandbox's snapshots.
func (r *Remote) Snapshots(ctx context.Context, id string) ([]SnapshotInfo, error) {
	list, err := r.C.ListSnapshots(ctx, id)
	out := make([]SnapshotInfo, 0, len(list))
	for i := range list {
		out = append(out, remoteSnap(&list[i]))
	}
	return out, err
}

// Restore restores a sandbox's files.
func (r *Remote) Restore(ctx context.Context, id, ref string, undo int) (RestoreInfo, error) {
	res, err := r.C.Restore(ctx, id, client.RestoreRequest{Snapshot: ref, UndoSteps: undo})
	if err != nil {
		return RestoreInfo{}, err
	}
	return RestoreInfo{Snapshot: res.Snapshot.ID, Added: res.Added, Changed: res.Changed, Removed: res.Removed}, nil
}

// Diff compares two states of a sandbox's files.
func (r *Remote) Diff(ctx context.Context, id, from, to string, step int64) (*snapshot.Diff, error) {
	d, err := r.C.Diff(ctx, id, client.DiffOptions{From: from, To: to, Step: step})
	if err != nil {
		return nil, err
	}
	// The SDK's Diff has the wire form of snapshot.Diff.
	b, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	var out snapshot.Diff
	return &out, json.Unmarshal(b, &out)
}

// Fork makes a sandbox from a snapshot.
func (r *Remote) Fork(ctx context.Context, id, ref string, ttl time.Duration) (SandboxInfo, error) {
	res, err := r.C.Fork(ctx, ref, client.ForkRequest{Sandbox: id, TTL: ttl})
	if err != nil {
		return SandboxInfo{}, err
	}
	return remoteInfo(&res.Sandbox), nil
}
