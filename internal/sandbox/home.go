package sandbox

import (
	"path"
	"regexp"
	"strings"
)

// E2BHome is the home E2B's sandboxes have, and the E2B endpoints give
// theirs: /home/user, user "user".
const E2BHome = "/home/user"

// homeRE is what a Spec's Home may be: /home/NAME, NAME a user name.
var homeRE = regexp.MustCompile(`^/home/[a-z_][a-z0-9_-]{0,31}$`)

// ValidHome says what is wrong with home as a Spec's Home; nil for "" and
// /home/NAME.
func ValidHome(home string) error {
	if home != "" && !homeRE.MatchString(home) {
		return invalid("home %q: give /home/NAME, NAME a user name (lower-case letters, digits, '_' or '-'), like %s", home, E2BHome)
	}
	return nil
}

// HomeOf returns the home of a sandbox whose Spec.Home is home: home, or
// Workspace when it is empty.
func HomeOf(home string) string {
	if home == "" {
		return Workspace
	}
	return home
}

// UserOf returns the USER of a sandbox whose Spec.Home is home: the last
// name of home, or "sandbox" when it is empty.
func UserOf(home string) string {
	if home == "" {
		return "sandbox"
	}
	return path.Base(home)
}

// PolicyPath is the one name the policy judges path by, in a sandbox whose
// Spec.Home is home: absolute (a relative path is the file API's, from the
// home), cleaned lexically (no ".", "..", repeated or trailing slashes),
// and the home written as Workspace, the file system both names are. So a
// rule about /workspace/secret holds for /home/user/secret, and a rule
// allowing writes only under /workspace allows the home's. In a sandbox
// without a home, /home/... is another directory and stays as written.
// Empty stays empty.
func PolicyPath(home, p string) string {
	if p == "" {
		return ""
	}
	if !path.IsAbs(p) {
		p = path.Join(HomeOf(home), p)
	}
	p = path.Clean(p)
	if home != "" && (p == home || strings.HasPrefix(p, home+"/")) {
		p = Workspace + p[len(home):]
	}
	return p
}
