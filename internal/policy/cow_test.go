package policy

import (
	"context"
	"testing"
)

// TestCowMounts: the mounts allowlist takes mode cow (allowed by a cow or
// an rw entry), MountAllowed allows nothing with an empty list, and
// [approval] mounts names the directories only an operator decides.
func TestCowMounts(t *testing.T) {
	p, err := New(File{Mounts: []string{"/srv/p:/w:cow", "/srv/rw:/rw:rw"}, Approval: Approval{Mounts: []string{"/srv/p/"}}})
	if err != nil {
		t.Fatal(err)
	}
	for m, want := range map[string]bool{
		"/srv/p:/w:cow": true, "/srv/p:/w:ro": true, "/srv/p:/w:rw": false, "/srv/p:/x:cow": false,
		"/srv/rw:/rw:cow": true, "/etc:/w:cow": false,
	} {
		if got := p.MountAllowed(m); got != want {
			t.Errorf("MountAllowed(%q) = %v, want %v", m, got, want)
		}
	}
	if d, _ := p.Decide(context.Background(), Request{Action: ActionCreate, Mounts: []string{"/etc:/w:cow"}}); d.Verdict != Deny {
		t.Errorf("a cow mount off the list: %+v", d)
	}
	if !p.MountNeedsApproval("/srv/p") || p.MountNeedsApproval("/srv/rw") {
		t.Error("MountNeedsApproval")
	}
	if Default().MountAllowed("/srv/p:/w:cow") {
		t.Error("the default policy lets API creates mount host paths")
	}
	if all, _ := New(File{Approval: Approval{Mounts: []string{"*"}}}); !all.MountNeedsApproval("/anything") {
		t.Error(`"*" needs approval for every mount`)
	}
	if _, err := New(File{Mounts: []string{"/a:/b:cowx"}}); err == nil {
		t.Error("mode cowx accepted")
	}
}
