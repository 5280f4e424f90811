package sandbox

import "strings"

// PatternCovered reports whether the allow-host pattern p allows nothing
// that one of the patterns in ceiling does not: same or wider name (a
// "*.x" ceiling covers names below x and "*.y.x"), and the same port (a
// ceiling without a port covers 80 and 443, and a p without one). A p that
// does not parse is covered by nothing.
func PatternCovered(p string, ceiling []string) bool {
	name, port, err := ParseHostPattern(p)
	if err != nil {
		return false
	}
	for _, c := range ceiling {
		cname, cport, err := ParseHostPattern(c)
		if err != nil {
			continue
		}
		portOK := cport == port || (cport == 0 && (port == 80 || port == 443))
		nameOK := cname == name || (strings.HasPrefix(cname, "*.") && strings.HasSuffix(name, cname[1:]))
		if portOK && nameOK {
			return true
		}
	}
	return false
}

// PatternMatches reports whether the allow-host pattern p lets a request
// reach host (a lower-case name) on port: the name, or a name below a
// "*.x" pattern, on the pattern's port (none given: 80 and 443).
func PatternMatches(p, host string, port int) bool {
	name, pport, err := ParseHostPattern(p)
	if err != nil {
		return false
	}
	if pport != port && (pport != 0 || (port != 80 && port != 443)) {
		return false
	}
	if strings.HasPrefix(name, "*.") {
		return strings.HasSuffix(host, name[1:])
	}
	return host == name
}
