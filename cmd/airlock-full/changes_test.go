package main

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/client"
)

// TestChangesTextWarnings: the listing names what a reviewer should look
// at (a world-writable entry), refusals and conflicts, each on its line,
// with what the sandbox wrote rendered (a control shows as ⟨U+001B⟩).
func TestChangesTextWarnings(t *testing.T) {
	m := client.CowMount{Target: "/w", Source: "/host", Changes: []client.CowChange{
		{Change: client.Change{Path: "/w/open", Kind: "added", After: &client.TreeEntry{Path: "/w/open", Type: "file", Mode: 0o666}}, Warning: "world-writable (mode 0666): apply clears group and world write"},
		{Change: client.Change{Path: "/w/esc", Kind: "added", After: &client.TreeEntry{Path: "/w/esc", Type: "symlink", Mode: 0o777, Target: "y/../.."}}, Refused: "a symlink leading out of the mount\x1b[2K"},
		{Change: client.Change{Path: "/w/late", Kind: "modified", Before: &client.TreeEntry{Path: "/w/late", Type: "file", Mode: 0o644}, After: &client.TreeEntry{Path: "/w/late", Type: "file", Mode: 0o644, Size: 1}}, Conflict: "the host changed it"},
	}}
	got := changesText(m)
	for _, want := range []string{
		"warning  /w/open: world-writable (mode 0666)",
		"refused  /w/esc: a symlink leading out of the mount⟨U+001B⟩[2K",
		"conflict /w/late: the host changed it",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the listing lacks %q:\n%s", want, got)
		}
	}
	if strings.ContainsRune(got, 0x1b) {
		t.Errorf("the listing holds a raw ESC:\n%q", got)
	}
	// A listing that lacks a side (an older or broken daemon's) is shown,
	// not a crash.
	m.Changes = []client.CowChange{{Change: client.Change{Path: "/w/a", Kind: "mode"}}, {Change: client.Change{Path: "/w/b", Kind: "symlink", After: &client.TreeEntry{Type: "symlink"}}}}
	if got := changesText(m); !strings.Contains(got, "/w/a") || !strings.Contains(got, "/w/b") {
		t.Errorf("a listing without sides:\n%s", got)
	}
}
