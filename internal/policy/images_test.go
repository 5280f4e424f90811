package policy

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestRepository(t *testing.T) {
	for ref, want := range map[string]string{
		"python:3.12-slim":                  "docker.io/library/python",
		"python":                            "docker.io/library/python",
		"team/app:1":                        "docker.io/team/app",
		"Registry.Example/team/app:1":       "registry.example/team/app",
		"localhost:5000/app@sha256:ab":      "localhost:5000/app",
		"127.0.0.1:5000/a/b/c:tag":          "127.0.0.1:5000/a/b/c",
		"localhost/app":                     "localhost/app",
		"registry.example/team/app@sha256:": "registry.example/team/app",
	} {
		if got := Repository(ref); got != want {
			t.Errorf("Repository(%q) = %q, want %q", ref, got, want)
		}
	}
}

// TestImagesPolicy: a create's image outside the policy's images, or not
// pinned by digest when require_image_digest is set, is denied naming the
// rule; one inside is allowed; a malformed pattern fails the load.
func TestImagesPolicy(t *testing.T) {
	digest := "@sha256:" + strings.Repeat("0", 64)
	p, err := New(File{Images: []string{"registry.example/team/*", "127.0.0.1:*/deep/**", "docker.io/library/python"}, RequireImageDigest: true})
	if err != nil {
		t.Fatal(err)
	}
	for ref, rule := range map[string]string{
		"registry.example/team/app" + digest:            "",
		"registry.example/team/app:1" + digest:          "",
		"registry.example/team/sub/app" + digest:        "images",
		"registry.example/other/app" + digest:           "images",
		"127.0.0.1:5000/deep/a/b" + digest:              "",
		"127.0.0.1:5000/deep" + digest:                  "images",
		"python" + digest:                               "",
		"evil.example/registry.example/team/x" + digest: "images",
		"registry.example/team/app:1":                   "require_image_digest",
		"registry.example/team/app@sha256:short":        "require_image_digest",
		"":                                              "",
	} {
		d, err := p.Decide(context.Background(), Request{Action: ActionCreate, Image: ref})
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case rule == "" && d.Verdict != Allow:
			t.Errorf("%q: %+v, want allowed", ref, d)
		case rule != "" && (d.Verdict != Deny || d.Rule != rule || !strings.Contains(d.Reason, ref)):
			t.Errorf("%q: %+v, want denied by %s naming the image", ref, d, rule)
		}
	}
	var d *Denied
	if err := p.CheckImage("registry.example/other/app:1"); !errors.As(err, &d) || d.Decision.Rule != "images" {
		t.Errorf("CheckImage outside: %v", err)
	}
	if err := p.CheckImage("registry.example/team/app" + digest); err != nil {
		t.Errorf("CheckImage inside: %v", err)
	}
	for _, bad := range []string{"registry.example/app:1", "registry.example/app@sha256:0", "[", ""} {
		if _, err := New(File{Images: []string{bad}}); err == nil {
			t.Errorf("pattern %q loaded", bad)
		}
	}
	if _, err := New(File{Images: []string{"localhost:5000/app"}}); err != nil {
		t.Errorf("a registry's port refused as a tag: %v", err)
	}
}
