package kubernetes

import "testing"

// TestQuoted: the image of the kubelet's "Pulling" event is the quoted
// part of its message; a message without one names the sandbox's image.
func TestQuoted(t *testing.T) {
	for _, tt := range []struct{ msg, want string }{
		{`Pulling image "127.0.0.1:5000/team/python:3"`, "127.0.0.1:5000/team/python:3"},
		{`Pulling image "a" and "b"`, "a"},
		{`Pulling image`, "def"},
		{`Pulling image ""`, "def"},
		{`Pulling image "unterminated`, "def"},
	} {
		if got := quoted(tt.msg, "def"); got != tt.want {
			t.Errorf("quoted(%q) = %q, want %q", tt.msg, got, tt.want)
		}
	}
}
