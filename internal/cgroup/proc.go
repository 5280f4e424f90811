package cgroup

import (
	"os"
	"slices"
	"strconv"
	"strings"
)

// Membership is one line of /proc/PID/cgroup: the group a process is in,
// in one hierarchy.
type Membership struct {
	// Controllers are the v1 controllers mounted on the hierarchy
	// ("cpu,cpuacct" gives two); none for the v2 hierarchy and for a
	// named one (name=systemd, kept as given).
	Controllers []string
	// V2 says the line is the unified hierarchy's ("0::/…").
	V2 bool
	// Path is the group, relative to the hierarchy's root ("/airlock/ID").
	Path string
}

// Of reads the groups process pid is in (pid 0: this process) from
// /proc/PID/cgroup: the one reader of that file.
func Of(pid int) ([]Membership, error) {
	p := "/proc/self/cgroup"
	if pid != 0 {
		p = "/proc/" + strconv.Itoa(pid) + "/cgroup"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	return parseProcCgroup(string(b)), nil
}

// parseProcCgroup parses the content of /proc/PID/cgroup (cgroups(7)):
// "hierarchy-ID:controller-list:cgroup-path" a line.
func parseProcCgroup(s string) []Membership {
	var out []Membership
	for _, line := range strings.Split(s, "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		m := Membership{Path: f[2], V2: f[0] == "0" && f[1] == ""}
		if f[1] != "" {
			m.Controllers = strings.Split(f[1], ",")
		}
		out = append(out, m)
	}
	return out
}

// Has says whether the membership's hierarchy carries controller c.
func (m Membership) Has(c string) bool { return slices.Contains(m.Controllers, c) }

// Within says whether process pid is in the group rel ("airlock/ID") or
// below it, in any hierarchy. A process that is gone is in none.
func Within(pid int, rel string) bool {
	ms, err := Of(pid)
	if err != nil {
		return false
	}
	want := "/" + strings.Trim(rel, "/")
	for _, m := range ms {
		if m.Path == want || strings.HasPrefix(m.Path, want+"/") {
			return true
		}
	}
	return false
}
