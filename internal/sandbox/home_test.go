package sandbox

import (
	"errors"
	"strings"
	"testing"
)

func TestHome(t *testing.T) {
	for _, h := range []string{"", "/home/user", "/home/a_b-1"} {
		if err := ValidHome(h); err != nil {
			t.Errorf("ValidHome(%q): %v", h, err)
		}
	}
	for _, h := range []string{"/workspace", "/home", "/home/", "/home/User", "/home/a/b", "/home/../etc", "/etc", "home/user", "/home/user/"} {
		if err := ValidHome(h); !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidHome(%q): %v, want ErrInvalid", h, err)
		}
	}
	if HomeOf("") != Workspace || UserOf("") != "sandbox" || HomeOf(E2BHome) != E2BHome || UserOf(E2BHome) != "user" {
		t.Error("HomeOf and UserOf")
	}
	err := (Capabilities{}).CheckSpec("wasm", Spec{Home: E2BHome})
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "home") {
		t.Errorf("a home on a driver without Capabilities.Home: %v", err)
	}
	if err := (Capabilities{Home: true}).CheckSpec("native", Spec{Home: E2BHome}); err != nil {
		t.Errorf("a home on a driver with it: %v", err)
	}
}
