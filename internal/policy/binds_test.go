package policy

import (
	"strings"
	"testing"
)

// TestUnenforceableRefused: what the daemon cannot enforce is refused when
// the policy loads, with an error that says so, instead of being accepted
// and never matching. Nothing gives keys or sandboxes labels, so a rule on
// labels could never fire.
func TestUnenforceableRefused(t *testing.T) {
	for name, tc := range map[string]struct {
		f    File
		want string
	}{
		"a rule on labels":      {File{Rules: []Rule{{Name: "interns", When: `"team" in labels && labels["team"] == "interns"`, Decision: Deny}}}, "labels"},
		"a network allow entry": {File{Network: &Network{Allow: []string{"http://pypi.org/simple"}}}, "network allow"},
		"a network deny entry":  {File{Network: &Network{Deny: []string{"not a host!"}}}, "network deny"},
	} {
		_, err := New(tc.f)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", name, err, tc.want)
		}
	}
}
