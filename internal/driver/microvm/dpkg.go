package microvm

import (
	"bufio"
	"fmt"
	"io"
	"runtime"
	"sort"
	"strings"
)

// DefaultPackages are the Debian packages whose files, with those of every
// package they depend on, make a microVM's default root: a shell and the
// usual tools, Python, and, where the host has them (a name ending in
// "?"), a Jupyter kernel and its client (the E2B code interpreter's
// runCode starts one in the sandbox). The files come from the host's
// installed packages (its dpkg database), as the native driver's composed
// root comes from the host's /usr; a virtual machine sees a disk image of
// them and nothing else of the host.
var DefaultPackages = []string{
	"bash", "ca-certificates", "coreutils", "dash", "diffutils", "findutils", "grep", "gzip",
	"hostname", "mount", "procps", "python3", "sed", "tar", "util-linux",
	"python3-ipykernel?", "python3-jupyter-client?",
}

// leftOutPackages are never part of a root's closure, though a package
// of it depends on them: python3-debugpy (the kernel's debugger, which
// ipykernel goes without when it cannot import it) would bring gdb, ICU,
// Boost and GLib, 81 of the 115 MiB python3-ipykernel needs otherwise.
var leftOutPackages = map[string]bool{"python3-debugpy": true}

// dpkgPackage is one installed package of the dpkg database.
type dpkgPackage struct {
	Name, Version, Arch string
	// Depends are the package's Pre-Depends and Depends, each a list of
	// alternatives.
	Depends [][]string
	// Provides are the virtual packages it provides.
	Provides []string
}

// parseDpkgStatus reads the installed packages of a dpkg status file.
func parseDpkgStatus(r io.Reader) (map[string]*dpkgPackage, error) {
	pkgs := map[string]*dpkgPackage{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	fields := map[string]string{}
	var last string
	flush := func() {
		defer clear(fields)
		if fields["Package"] == "" || !strings.HasSuffix(fields["Status"], " installed") {
			return
		}
		p := &dpkgPackage{Name: fields["Package"], Version: fields["Version"], Arch: fields["Architecture"]}
		for _, f := range []string{"Pre-Depends", "Depends"} {
			for _, alt := range splitList(fields[f]) {
				var names []string
				for _, a := range strings.Split(alt, "|") {
					if n := depName(a); n != "" {
						names = append(names, n)
					}
				}
				if len(names) > 0 {
					p.Depends = append(p.Depends, names)
				}
			}
		}
		for _, v := range splitList(fields["Provides"]) {
			if n := depName(v); n != "" {
				p.Provides = append(p.Provides, n)
			}
		}
		// A package installed for two architectures keeps the host's.
		if old, dup := pkgs[p.Name]; dup && old.Arch == runtime.GOARCH {
			return
		}
		pkgs[p.Name] = p
	}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			flush()
		case line[0] == ' ' || line[0] == '\t':
			if last != "" {
				fields[last] += " " + strings.TrimSpace(line)
			}
		default:
			k, v, ok := strings.Cut(line, ":")
			if ok {
				last = k
				fields[k] = strings.TrimSpace(v)
			}
		}
	}
	flush()
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read the dpkg database: %w", err)
	}
	return pkgs, nil
}

// splitList splits a comma-separated dependency field.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// depName is the package name of one dependency ("libc6 (>= 2.34)",
// "python3:any").
func depName(d string) string {
	f := strings.Fields(d)
	if len(f) == 0 {
		return ""
	}
	n, _, _ := strings.Cut(f[0], ":")
	return n
}

// packageClosure returns the installed packages of roots and everything
// they depend on, sorted by name. A dependency is met by the first of its
// alternatives that is installed, or provided by an installed package. A
// root that is not installed is an error, unless its name ends in "?"; an unmet dependency of another
// package is left out (dpkg allows that for a package being configured),
// and so is a dependency on one of leftOutPackages.
func packageClosure(pkgs map[string]*dpkgPackage, roots []string) ([]*dpkgPackage, error) {
	providers := map[string]string{}
	names := make([]string, 0, len(pkgs))
	for n := range pkgs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, v := range pkgs[n].Provides {
			if _, ok := providers[v]; !ok {
				providers[v] = n
			}
		}
	}
	resolve := func(name string) *dpkgPackage {
		if p, ok := pkgs[name]; ok {
			return p
		}
		if n, ok := providers[name]; ok {
			return pkgs[n]
		}
		return nil
	}
	seen := map[string]*dpkgPackage{}
	var walk func(p *dpkgPackage)
	walk = func(p *dpkgPackage) {
		if _, ok := seen[p.Name]; ok {
			return
		}
		seen[p.Name] = p
		for _, alts := range p.Depends {
			for _, a := range alts {
				if leftOutPackages[a] {
					break
				}
				if d := resolve(a); d != nil {
					walk(d)
					break
				}
			}
		}
	}
	for _, r := range roots {
		name, optional := strings.CutSuffix(r, "?")
		p := resolve(name)
		if p == nil && optional {
			continue
		}
		if p == nil {
			return nil, fmt.Errorf("package %s is not installed on this host (apt-get install %s)", name, name)
		}
		walk(p)
	}
	out := make([]*dpkgPackage, 0, len(seen))
	for _, p := range seen {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
