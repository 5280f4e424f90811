package client

import (
	"context"
	"net/url"
)

// Copy-on-write mounts: what a sandbox changed in a host directory,
// pending until a person applies or discards it.

// CowChange is one pending change, in Diff's format (Path is absolute in
// the sandbox), with why an apply would refuse it or that the host
// changed under it.
type CowChange struct {
	Change
	Refused  string `json:"refused,omitempty"`
	Conflict string `json:"conflict,omitempty"`
	// Entry stands for what the listing shows of the change (its type,
	// mode, size, content and symlink target; empty for a deletion): send
	// it back in ChangesRequest.Expect to apply only what was reviewed.
	Entry string `json:"entry,omitempty"`
	// Warning says what a reviewer should look at that apply does not
	// refuse (a world-writable mode).
	Warning string `json:"warning,omitempty"`
}

// CowMount is a cow mount's pending change.
type CowMount struct {
	Target  string      `json:"target"`
	Source  string      `json:"source"`
	Changes []CowChange `json:"changes"`
	// Approval: only an operator may apply or discard.
	Approval  bool `json:"approval"`
	Truncated bool `json:"truncated,omitempty"`
}

// Reviewed is the Expect of an apply of what m shows: each change's path
// and Entry.
func (m CowMount) Reviewed() map[string]string {
	out := make(map[string]string, len(m.Changes))
	for _, c := range m.Changes {
		out[c.Path] = c.Entry
	}
	return out
}

// ChangesRequest chooses a cow mount (Target: may be empty when the
// sandbox has one) and paths in it (relative to its root or absolute in
// the sandbox; a directory stands for all below it; none: every change).
type ChangesRequest struct {
	Target string   `json:"target,omitempty"`
	Paths  []string `json:"paths,omitempty"`
	// Expect (apply only) maps paths to the Entry each change showed
	// ("" for a deletion; CowMount.Reviewed makes it): a change that is
	// no longer that (its type, mode, size, content or symlink target) is
	// a conflict, and the host gets the reviewed entry, mode included.
	Expect map[string]string `json:"expect,omitempty"`
}

// PathReason is a path and why it was left alone.
type PathReason struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// AppliedChange is a path an apply wrote.
type AppliedChange struct {
	Path string `json:"path"`
	Kind string `json:"kind"`
	// Digest is the sha256 of the content written; Before the host's when
	// the sandbox started (files only).
	Digest string `json:"digest,omitempty"`
	Before string `json:"before,omitempty"`
	Note   string `json:"note,omitempty"`
}

// ApplyResult says what an apply did.
type ApplyResult struct {
	Target  string          `json:"target"`
	Applied []AppliedChange `json:"applied"`
	Refused []PathReason    `json:"refused"`
}

// DiscardResult says what a discard did.
type DiscardResult struct {
	Target    string       `json:"target"`
	Discarded []string     `json:"discarded"`
	Refused   []PathReason `json:"refused,omitempty"`
}

// PendingChange is a sandbox's cow mount with pending changes.
type PendingChange struct {
	Sandbox  string `json:"sandbox"`
	Key      string `json:"key"`
	KeyName  string `json:"key_name,omitempty"`
	Target   string `json:"target"`
	Source   string `json:"source"`
	Approval bool   `json:"approval"`
	Count    int    `json:"count"`
}

// Changes lists the pending changes of sandbox id's cow mounts.
func (c *Client) Changes(ctx context.Context, id string) ([]CowMount, error) {
	var out struct {
		Mounts []CowMount `json:"mounts"`
	}
	return out.Mounts, c.call(ctx, request{method: "GET", path: sandboxPath(id, "changes")}, &out)
}

// ApplyChanges writes the chosen changes to the host. When the host
// changed under one of them since the sandbox started nothing is applied,
// and the error is an *Error with code "conflict" and Conflicts.
func (c *Client) ApplyChanges(ctx context.Context, id string, r ChangesRequest) (*ApplyResult, error) {
	var out ApplyResult
	return &out, c.call(ctx, request{method: "POST", path: sandboxPath(id, "changes/apply"), json: r}, &out)
}

// DiscardChanges drops the chosen changes.
func (c *Client) DiscardChanges(ctx context.Context, id string, r ChangesRequest) (*DiscardResult, error) {
	var out DiscardResult
	return &out, c.call(ctx, request{method: "POST", path: sandboxPath(id, "changes/discard"), json: r}, &out)
}

// PendingChanges lists every sandbox's cow mounts with pending changes
// (operator keys).
func (c *Client) PendingChanges(ctx context.Context) ([]PendingChange, error) {
	var out struct {
		Changes []PendingChange `json:"changes"`
	}
	return out.Changes, c.call(ctx, request{method: "GET", path: "/v1/changes", query: url.Values{}}, &out)
}
