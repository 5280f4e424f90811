package policy

import (
	"fmt"
	"path"
	"strings"
)

// checkImagePatterns refuses a malformed pattern of File.Images at load,
// not at the first create it would have matched.
func checkImagePatterns(patterns []string) error {
	for _, p := range patterns {
		if p == "" || strings.Contains(p, "@") || strings.LastIndex(p, ":") > strings.LastIndex(p, "/") {
			return fmt.Errorf("images: %q: a pattern names repositories (registry.example/team/*), no tag or digest", p)
		}
		if _, err := path.Match(strings.TrimSuffix(p, "/**"), ""); err != nil {
			return fmt.Errorf("images: %q: %w", p, err)
		}
	}
	return nil
}

// imageAllowed says the image ref's repository matches one of patterns:
// globs over the repository's full name (REGISTRY/PATH, as normalized by
// Repository), where "*" matches within one path element and a last
// "/**" any number of further elements.
func imageAllowed(patterns []string, ref string) bool {
	repo := Repository(ref)
	for _, p := range patterns {
		if base, ok := strings.CutSuffix(p, "/**"); ok {
			for r := repo; strings.Contains(r, "/"); {
				r = r[:strings.LastIndex(r, "/")]
				if m, _ := path.Match(base, r); m {
					return true
				}
			}
			continue
		}
		if m, _ := path.Match(p, repo); m {
			return true
		}
	}
	return false
}

// Repository is the repository of an image reference without its tag or
// digest, with the registry Docker assumes made explicit: "python:3.12"
// is "docker.io/library/python", "team/app" is "docker.io/team/app",
// "localhost:5000/app@sha256:…" is "localhost:5000/app".
func Repository(ref string) string {
	repo, _, _ := strings.Cut(ref, "@")
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	first, _, ok := strings.Cut(repo, "/")
	if !ok || !strings.ContainsAny(first, ".:") && first != "localhost" {
		if !strings.Contains(repo, "/") {
			repo = "library/" + repo
		}
		repo = "docker.io/" + repo
	}
	return strings.ToLower(repo[:strings.Index(repo, "/")]) + repo[strings.Index(repo, "/"):]
}

// pinned says ref names its image by digest.
func pinned(ref string) bool {
	_, d, ok := strings.Cut(ref, "@")
	return ok && strings.HasPrefix(d, "sha256:") && len(d) == len("sha256:")+64
}

// imageDecisions are the refusals of a create's image by the policy's
// images and require_image_digest.
func (f *File) imageDecisions(ref string, deny func(rule, format string, a ...any)) {
	if ref == "" {
		return
	}
	if len(f.Images) > 0 && !imageAllowed(f.Images, ref) {
		deny("images", "image %q (repository %s) matches none of the policy's images (allowed: %s): use an image from those repositories, or an operator adds its repository to images in the policy file", ref, Repository(ref), strings.Join(f.Images, ", "))
	}
	if f.RequireImageDigest && !pinned(ref) {
		deny("require_image_digest", "image %q is not pinned by digest and the policy requires one (require_image_digest): name it as REF@sha256:DIGEST (`airlock image pull REF` prints the digest)", ref)
	}
}

// CheckImage refuses (with a *Denied naming the rule) an image the
// policy's images and require_image_digest do not allow: what
// `airlock image pull --policy` asks before it pulls.
func (p *Policy) CheckImage(ref string) error {
	var d *Denied
	p.f.imageDecisions(ref, func(rule, format string, a ...any) {
		if d == nil {
			d = &Denied{Decision: Decision{Verdict: Deny, Rule: rule, Reason: fmt.Sprintf(format, a...)}}
		}
	})
	if d != nil {
		return d
	}
	return nil
}
