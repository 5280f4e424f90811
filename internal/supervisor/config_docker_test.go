package supervisor

import (
	"strings"
	"testing"
)

// TestTemplateImage: image and runtime go to the spec of a docker
// template, and are refused where they mean nothing.
func TestTemplateImage(t *testing.T) {
	c, err := Config{Templates: []Template{{Name: "py", Driver: "docker", Image: "python:3.12-slim", Runtime: "runsc"}}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if s := c.Templates[0].spec(); s.Image != "python:3.12-slim" || s.Runtime != "runsc" {
		t.Errorf("spec image %q runtime %q", s.Image, s.Runtime)
	}
	for _, tt := range []struct {
		t    Template
		want string
	}{
		{Template{Name: "a", Driver: "docker"}, "needs an image"},
		{Template{Name: "b", Image: "python:3.12-slim"}, `are for drivers "docker" and "kubernetes"`},
		{Template{Name: "c", Driver: "gvisor", Runtime: "runsc"}, `are for drivers "docker" and "kubernetes"`},
		{Template{Name: "d", Driver: "docker", Image: "bad image"}, "image \"bad image\""},
	} {
		if _, err := (Config{Templates: []Template{tt.t}}).withDefaults(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("template %+v: %v, want an error saying %q", tt.t, err, tt.want)
		}
	}
}
