package sandbox

import (
	"path"
	"regexp"
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
