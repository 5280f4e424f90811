package supervisor

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// E2BConfig configures the E2B-compatible endpoints (internal/api/e2b),
// which serve the official E2B SDKs on the daemon's listener:
//
//	[e2b]
//	disabled = false
//	templates = ["base=default", "code-interpreter-v1=default"]
//	interpreter = ["code-interpreter-v1"]
type E2BConfig struct {
	// Disabled turns the E2B endpoints off, and with them exposed ports
	// (getHost), which airlock's own API has no way to name: ports_listen
	// is then refused. False: on.
	Disabled bool `toml:"disabled"`
	// Templates map the template names E2B's SDKs ask for to this daemon's
	// templates, as "E2B_NAME=TEMPLATE". Empty: base and
	// code-interpreter-v1 (the SDKs' defaults) to the template "default",
	// when there is one. A name not listed gets E2B's not-found error.
	Templates []string `toml:"templates"`
	// Interpreter lists the E2B templates whose sandboxes start their
	// default Python context (a Jupyter kernel) as soon as they are
	// created, so that the first runCode finds it ready. Any sandbox runs
	// code; the others start a kernel at their first runCode. Empty:
	// code-interpreter-v1.
	Interpreter []string `toml:"interpreter"`
	// Domain is what the names of sandboxes' exposed ports end in
	// (PORT-SANDBOXID.DOMAIN, E2B's getHost), with the port clients reach
	// the daemon on when it is not 80: a wildcard DNS name that points at
	// the daemon, or under .localhost. Empty: sandbox.localhost and the
	// port of ports_listen, else of listen.
	Domain string `toml:"domain"`
	// PortsListen is a second listener that serves exposed ports only.
	// Empty: none (the daemon's listener serves them). Refused with
	// Disabled.
	PortsListen string `toml:"ports_listen"`
}

// DefaultE2BTemplates are the E2B template names mapped to
// DefaultTemplate when E2BConfig.Templates is empty.
var DefaultE2BTemplates = []string{"base", "code-interpreter-v1"}

// DefaultE2BInterpreter is E2BConfig.Interpreter's default.
var DefaultE2BInterpreter = []string{"code-interpreter-v1"}

// TemplateMap returns the E2B template names and the templates they make.
func (e E2BConfig) TemplateMap() map[string]string {
	out := map[string]string{}
	for _, m := range e.Templates {
		name, tmpl, _ := strings.Cut(m, "=")
		out[name] = tmpl
	}
	return out
}

// validE2BName says whether s can be an E2B template name or alias: 1 to
// 128 letters, digits and "-_.:/".
func validE2BName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && !strings.ContainsRune("-_.:/", r) {
			return false
		}
	}
	return true
}

// withDefaults fills E2B's defaults and checks the mapping against the
// templates there are.
func (e E2BConfig) withDefaults(templates []Template) (E2BConfig, error) {
	if e.Disabled && e.PortsListen != "" {
		// Exposed ports are the E2B endpoints' (getHost): airlock's own
		// API has no way to name them, and its sandboxes none to make
		// their ports private, so a disabled E2B serves none.
		return e, keyErr("e2b.ports_listen", errors.New("exposed ports are served only with the E2B endpoints, which disabled = true turns off: remove ports_listen, or enable them"))
	}
	have := func(name string) bool {
		return slices.ContainsFunc(templates, func(t Template) bool { return t.Name == name })
	}
	if len(e.Templates) == 0 {
		e.Templates = nil
		if have(DefaultTemplate) {
			for _, n := range DefaultE2BTemplates {
				e.Templates = append(e.Templates, n+"="+DefaultTemplate)
			}
		}
	}
	seen := map[string]bool{}
	for i, m := range e.Templates {
		key := fmt.Sprintf("e2b.templates[%d]", i)
		name, tmpl, ok := strings.Cut(m, "=")
		switch {
		case !ok || !validE2BName(name):
			return e, keyErr(key, fmt.Errorf("%q: write E2B_NAME=TEMPLATE, like base=default", m))
		case seen[name]:
			return e, keyErr(key, fmt.Errorf("E2B template %q is mapped twice", name))
		case !have(tmpl):
			return e, keyErr(key, fmt.Errorf("%q: there is no template %q: define it with [[template]] or map %s to one there is", m, tmpl, name))
		}
		seen[name] = true
	}
	if len(e.Interpreter) == 0 {
		e.Interpreter = slices.Clone(DefaultE2BInterpreter)
	}
	for i, n := range e.Interpreter {
		if !validE2BName(n) {
			return e, keyErr(fmt.Sprintf("e2b.interpreter[%d]", i), fmt.Errorf("%q is not an E2B template name", n))
		}
	}
	return e, nil
}
