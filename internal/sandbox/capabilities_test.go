package sandbox

import (
	"errors"
	"strings"
	"testing"
)

// TestCheckSpec: each field of a Spec a driver may lack is refused by the
// capability it maps to, and only by it, with ErrUnsupported, what was
// asked and a fix; a driver's own reason replaces the general one.
func TestCheckSpec(t *testing.T) {
	all := Capabilities{HostRoot: true, HostMounts: true, CowMounts: true, Egress: true, Images: true, Modules: true}
	without := func(f func(*Capabilities)) Capabilities { c := all; f(&c); return c }
	tests := []struct {
		name string
		spec Spec
		lack Capabilities // all but the capability spec needs
		what string       // in the error
	}{
		{"host root", Spec{Root: "/srv/root"}, without(func(c *Capabilities) { c.HostRoot = false }), "root /srv/root"},
		{"host mounts", Spec{Mounts: []Mount{{Source: "/srv", Target: "/mnt"}}}, without(func(c *Capabilities) { c.HostMounts = false }), "mount /srv:/mnt:ro"},
		{"cow mounts", Spec{Mounts: []Mount{{Source: "/srv", Target: "/mnt"}, {Source: "/src", Target: "/src", Cow: true}}}, without(func(c *Capabilities) { c.CowMounts = false }), "cow mount /src"},
		{"egress", Spec{Network: Network{Mode: NetworkEgress}}, without(func(c *Capabilities) { c.Egress = false }), "network mode egress"},
		{"image", Spec{Image: "python:3.12-slim"}, without(func(c *Capabilities) { c.Images = false }), "image python:3.12-slim"},
		{"runtime", Spec{Runtime: "runsc"}, without(func(c *Capabilities) { c.Images = false }), "runtime runsc"},
		{"no image where one is needed", Spec{}, without(func(c *Capabilities) { c.NeedsImage = true }), "a sandbox without an image"},
		{"module", Spec{Module: "/srv/m.wasm"}, without(func(c *Capabilities) { c.Modules = false }), "module /srv/m.wasm"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := all.CheckSpec("x", tt.spec); err != nil && tt.name != "no image where one is needed" {
				t.Fatalf("a driver that can do everything: %v", err)
			}
			err := tt.lack.CheckSpec("x", tt.spec)
			var ue *UnsupportedError
			if !errors.As(err, &ue) || !errors.Is(err, ErrUnsupported) {
				t.Fatalf("got %v, want an UnsupportedError", err)
			}
			if ue.What != tt.what || !strings.Contains(ue.Why, "x driver") || ue.Fix == "" {
				t.Errorf("got what %q why %q fix %q; want what %q, why naming the driver, a fix", ue.What, ue.Why, ue.Fix, tt.what)
			}
		})
	}
	t.Run("image root", func(t *testing.T) {
		c := Capabilities{HostRoot: true, Images: true, ImageRoot: true}
		if err := c.CheckSpec("x", Spec{Image: "python:3.12-slim", Root: "/var/cache/airlock/images/roots/ab/rootfs"}); err != nil {
			t.Errorf("an unpacked image: %v", err)
		}
		for _, s := range []Spec{{Image: "python:3.12-slim"}, {Runtime: "runsc"}} {
			if err := c.CheckSpec("x", s); !errors.Is(err, ErrUnsupported) {
				t.Errorf("%+v: %v, want ErrUnsupported", s, err)
			}
		}
	})
	t.Run("image with a default", func(t *testing.T) {
		if err := (Capabilities{Images: true}).CheckSpec("x", Spec{}); err != nil {
			t.Errorf("a driver with a default image: %v", err)
		}
	})
	t.Run("the driver's reason", func(t *testing.T) {
		c := Capabilities{Lacks: map[Capability]Lack{CapEgress: {Why: "no sockets here", Fix: "use y"}}}
		err := c.CheckSpec("x", Spec{Network: Network{Mode: NetworkEgress}})
		if err == nil || err.Error() != "network mode egress: no sockets here (fix: use y)" {
			t.Errorf("got %v, want the driver's reason", err)
		}
	})
	t.Run("nothing asked", func(t *testing.T) {
		if err := (Capabilities{}).CheckSpec("x", Spec{Network: Network{Mode: NetworkNone}}); err != nil {
			t.Errorf("a spec asking nothing: %v", err)
		}
	})
}

// TestCheckExec: a terminal and a background exec are refused by the
// driver's PTY and Background.
func TestCheckExec(t *testing.T) {
	pty := ExecRequest{Argv: []string{"sh"}, PTY: &TermSize{Rows: 24, Cols: 80}}
	bg := ExecRequest{Argv: []string{"sh"}, Background: true}
	all := Capabilities{PTY: true, Background: true}
	for _, req := range []ExecRequest{pty, bg, {Argv: []string{"sh"}}} {
		if err := all.CheckExec("x", req); err != nil {
			t.Errorf("a driver with both: %v", err)
		}
	}
	if err := (Capabilities{Background: true}).CheckExec("x", pty); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "terminal") {
		t.Errorf("pty without PTY: %v", err)
	}
	if err := (Capabilities{PTY: true}).CheckExec("x", bg); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "background") {
		t.Errorf("background without Background: %v", err)
	}
	if err := (Capabilities{}).CheckExec("x", ExecRequest{Argv: []string{"sh"}}); err != nil {
		t.Errorf("a plain exec: %v", err)
	}
}
