package api

import (
	"errors"
	"io/fs"
	"net/http"
	"testing"
)

// The file mode a caller may give: permission bits only, in octal.
func TestPermBits(t *testing.T) {
	for _, c := range []struct {
		in   string
		want fs.FileMode
		ok   bool
	}{
		{"", 0o644, true},
		{"600", 0o600, true},
		{"0755", 0o755, true},
		{"777", 0o777, true},
		{"4755", 0, false}, // setuid
		{"2755", 0, false}, // setgid
		{"1777", 0, false}, // sticky
		{"8", 0, false},
		{"-1", 0, false},
		{"rwx", 0, false},
		{"77777777777777777777777", 0, false},
	} {
		got, err := permBits(c.in, 0o644)
		if c.ok {
			if err != nil || got != c.want {
				t.Errorf("permBits(%q) = %o, %v; want %o", c.in, got, err, c.want)
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Status != http.StatusBadRequest {
			t.Errorf("permBits(%q) = %o, %v; want a 400", c.in, got, err)
		}
	}
}
