package supervisor

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// capsDriver is the fake driver with the capabilities given.
type capsDriver struct {
	*fake.Driver
	caps sandbox.Capabilities
}

func (d capsDriver) Capabilities() sandbox.Capabilities { return d.caps }

// TestTemplateImage: image and runtime go to the spec of a docker
// template.
func TestTemplateImage(t *testing.T) {
	c, err := Config{Templates: []Template{{Name: "py", Driver: "docker", Image: "python:3.12-slim", Runtime: "runsc"}}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if s := c.Templates[0].spec(); s.Image != "python:3.12-slim" || s.Runtime != "runsc" {
		t.Errorf("spec image %q runtime %q", s.Image, s.Runtime)
	}
	if _, err := (Config{Templates: []Template{{Name: "d", Driver: "docker", Image: "bad image"}}}).withDefaults(); err == nil || !strings.Contains(err.Error(), "image \"bad image\"") {
		t.Errorf("a bad image name: %v", err)
	}
}

// TestTemplateCapabilities: the daemon refuses to start with a template
// its driver cannot run, with the template's name and the driver's
// reason, instead of failing the template's first create.
func TestTemplateCapabilities(t *testing.T) {
	docker := capsDriver{&fake.Driver{DriverName: "docker"}, sandbox.Capabilities{Shell: true, Images: true, NeedsImage: true, HostMounts: true,
		Lacks: map[sandbox.Capability]sandbox.Lack{sandbox.CapDefaultImage: {Why: "the docker driver needs an image the engine has", Fix: "give --image NAME"}}}}
	native := capsDriver{&fake.Driver{}, sandbox.Capabilities{Shell: true, HostRoot: true, HostMounts: true, Egress: true}}
	wasm := capsDriver{&fake.Driver{DriverName: "wasm"}, (&fake.Driver{}).Capabilities()}
	wasm.caps.Background, wasm.caps.Egress = false, false
	drivers := map[string]sandbox.Driver{"native": native, "docker": docker, "wasm": wasm}
	for _, tt := range []struct {
		t    Template
		want string // in the error; "" for none
	}{
		{Template{Name: "ok", Driver: "docker", Image: "python:3.12-slim", Mounts: []string{"/srv:/srv"}}, ""},
		{Template{Name: "ok-native", Root: "/srv/root", Network: TemplateNetwork{Mode: "egress", AllowHosts: []string{"pypi.org"}}}, ""},
		{Template{Name: "noimage", Driver: "docker"}, `template "noimage": a sandbox without an image: the docker driver needs an image the engine has`},
		{Template{Name: "image", Image: "python:3.12-slim"}, `template "image": image python:3.12-slim: the native driver runs no container images`},
		{Template{Name: "runtime", Runtime: "runsc"}, `template "runtime": runtime runsc`},
		{Template{Name: "cow", Driver: "docker", Image: "python:3.12-slim", Mounts: []string{"/srv:/srv:cow"}}, `template "cow": cow mount /srv: the docker driver cannot make copy-on-write mounts`},
		{Template{Name: "net", Driver: "wasm", Network: TemplateNetwork{Mode: "egress", AllowHosts: []string{"pypi.org"}}}, `template "net": network mode egress`},
		{Template{Name: "root", Driver: "docker", Image: "python:3.12-slim", Root: "/srv/root"}, `template "root": root /srv/root`},
	} {
		st := newFixture(t, Config{}).st
		sup, err := New(Options{Store: st, Drivers: drivers, Config: Config{Templates: []Template{tt.t}}, MemAvailable: func() (int64, error) { return 64 << 30, nil }})
		if tt.want == "" {
			if err != nil {
				t.Errorf("template %s: %v", tt.t.Name, err)
			} else {
				_ = sup.Close(context.Background())
			}
			continue
		}
		if err == nil {
			_ = sup.Close(context.Background())
		}
		if !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("template %s: %v, want ErrUnsupported saying %q", tt.t.Name, err, tt.want)
		}
	}
}
