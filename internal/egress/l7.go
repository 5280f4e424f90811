package egress

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// HostRule restricts the requests a sandbox may send to a host by method
// and path. A host with a rule is intercepted (its HTTPS is decrypted by
// the proxy), so that the rule holds over HTTPS too. The daemon's rules
// (Options.Rules) apply to every sandbox, a sandbox's network's
// (sandbox.Network.Rules: its template's and its create's) beside them.
//
//	[[egress.rule]]
//	host = "api.github.com"            # or "*.example.com"
//	allow = ["GET /repos/**", "HEAD"]  # empty: everything not denied
//	deny = ["* /admin/**"]
type HostRule = sandbox.HTTPRule

// l7Pattern is one "METHOD [PATH]" of a HostRule.
type l7Pattern struct {
	text   string
	method string   // "*" or one method, upper case
	segs   []string // the path's segments; nil: any path
}

type l7Rule struct {
	host         hostRule
	allow, deny  []l7Pattern
	allowListed  bool
	allowedTexts string
}

// ParseL7 parses "METHOD [PATH]": METHOD is a method or "*", PATH starts
// with "/" and its segments may be "*" (any one segment, or part of one:
// "v*") or "**" (any number of segments).
func ParseL7(s string) (l7Pattern, error) {
	f := strings.Fields(s)
	if len(f) == 0 || len(f) > 2 {
		return l7Pattern{}, fmt.Errorf("rule %q: give METHOD or METHOD /PATH", s)
	}
	m := strings.ToUpper(f[0])
	if m != "*" && !httpToken.MatchString(m) {
		return l7Pattern{}, fmt.Errorf("rule %q: %q is not a method", s, f[0])
	}
	p := l7Pattern{text: strings.Join(f, " "), method: m}
	if len(f) == 2 {
		if !strings.HasPrefix(f[1], "/") {
			return l7Pattern{}, fmt.Errorf("rule %q: the path must start with /", s)
		}
		p.segs = strings.Split(f[1][1:], "/")
		for _, seg := range p.segs {
			if _, err := path.Match(seg, ""); err != nil && seg != "**" {
				return l7Pattern{}, fmt.Errorf("rule %q: bad pattern %q", s, seg)
			}
		}
	}
	return p, nil
}

var httpToken = regexp.MustCompile(`^[A-Z][A-Z0-9_-]*$`)

func (p l7Pattern) matches(method string, segs []string) bool {
	if p.method != "*" && p.method != method {
		return false
	}
	return p.segs == nil || matchSegs(p.segs, segs)
}

func matchSegs(pat, segs []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := len(segs); i >= 0; i-- {
				if matchSegs(pat[1:], segs[i:]) {
					return true
				}
			}
			return false
		}
		if len(segs) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], segs[0]); !ok {
			return false
		}
		pat, segs = pat[1:], segs[1:]
	}
	return len(segs) == 0
}

func compileL7(rules []HostRule) ([]l7Rule, error) {
	var out []l7Rule
	for _, r := range rules {
		name := strings.ToLower(strings.TrimSuffix(r.Host, "."))
		if name == "" || strings.ContainsAny(name, ":/ ") {
			return nil, fmt.Errorf("egress rule: host %q: give a host name (or *.domain), without port", r.Host)
		}
		lr := l7Rule{host: hostRule{text: r.Host, name: name, wildcard: strings.HasPrefix(name, "*.")}, allowListed: len(r.Allow) > 0}
		for _, a := range r.Allow {
			p, err := ParseL7(a)
			if err != nil {
				return nil, fmt.Errorf("egress rule for %s: allow %w", r.Host, err)
			}
			lr.allow = append(lr.allow, p)
		}
		for _, d := range r.Deny {
			p, err := ParseL7(d)
			if err != nil {
				return nil, fmt.Errorf("egress rule for %s: deny %w", r.Host, err)
			}
			lr.deny = append(lr.deny, p)
		}
		lr.allowedTexts = strings.Join(r.Allow, ", ")
		out = append(out, lr)
	}
	return out, nil
}

func (r l7Rule) matchesHost(host string) bool {
	if r.host.wildcard {
		return strings.HasSuffix(host, r.host.name[1:])
	}
	return host == r.host.name
}

// canonicalPath reports whether p is clean: no "." or ".." segments, no
// empty ones. Rules are matched on the decoded path; one a server could
// read otherwise is refused rather than guessed at.
func canonicalPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c == p
}

// checkL7 decides a request's method and path against the rules for host.
// It returns the rule that refuses it, and why, or "" when it may go.
func (rs *Rules) checkL7(host, method string, u *url.URL) (rule, reason string) {
	var applicable []l7Rule
	for _, r := range rs.l7 {
		if r.matchesHost(host) {
			applicable = append(applicable, r)
		}
	}
	if len(applicable) == 0 {
		return "", ""
	}
	pth := u.Path
	if pth == "" {
		pth = "/"
	}
	if !canonicalPath(pth) {
		return "l7 " + host, fmt.Sprintf("the path %q is not canonical (no ., .. or empty segments) and %s has method and path rules", pth, host)
	}
	segs := strings.Split(pth[1:], "/")
	for _, r := range applicable {
		for _, d := range r.deny {
			if d.matches(method, segs) {
				return fmt.Sprintf("l7 %s deny %q", r.host.text, d.text), fmt.Sprintf("%s %s is denied for %s", method, pth, host)
			}
		}
	}
	for _, r := range applicable {
		if !r.allowListed {
			continue
		}
		if !slices.ContainsFunc(r.allow, func(a l7Pattern) bool { return a.matches(method, segs) }) {
			return fmt.Sprintf("l7 %s allow", r.host.text), fmt.Sprintf("%s %s is not among what %s allows: %s", method, pth, host, r.allowedTexts)
		}
	}
	return "", ""
}

// compiledSecret is a Secret with its hosts normalized.
type compiledSecret struct {
	Secret
	hosts []string
}

func (c compiledSecret) forHost(host string) bool { return slices.Contains(c.hosts, host) }

// headerValue is what the secret's header is set to.
func (c compiledSecret) headerValue() string {
	t := c.Template
	if t == "" {
		t = "{}"
	}
	return strings.ReplaceAll(t, "{}", string(c.Value))
}

// SecretEnvPrefix starts the name of the sandbox variable that holds a
// named secret's placeholder: AIRLOCK_SECRET_<NAME>.
const SecretEnvPrefix = "AIRLOCK_SECRET_"

var secretName = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

// ValidSecretName reports whether name may name a secret.
func ValidSecretName(name string) bool { return secretName.MatchString(name) }

func compileSecrets(secrets []Secret) ([]compiledSecret, error) {
	var out []compiledSecret
	names := map[string]bool{}
	for _, s := range secrets {
		c := compiledSecret{Secret: s}
		for _, h := range append([]string{s.Host}, s.Hosts...) {
			if h = strings.ToLower(strings.TrimSuffix(h, ".")); h != "" && !slices.Contains(c.hosts, h) {
				c.hosts = append(c.hosts, h)
			}
		}
		switch {
		case len(c.hosts) == 0:
			return nil, fmt.Errorf("egress secret %q: give its hosts", s.Name)
		case s.Name != "" && !secretName.MatchString(s.Name):
			return nil, fmt.Errorf("egress secret %q: a name is upper-case letters, digits and _", s.Name)
		case s.Name != "" && names[s.Name]:
			return nil, fmt.Errorf("egress secret %q: named twice", s.Name)
		case s.Name == "" && s.Header == "":
			return nil, fmt.Errorf("egress secret for %v: give a header, a name (for a placeholder), or both", c.hosts)
		case strings.ContainsAny(string(s.Value), "\r\n\x00"):
			return nil, fmt.Errorf("egress secret %q: give a one-line value", s.Name)
		}
		names[s.Name] = true
		out = append(out, c)
	}
	return out, nil
}

// newPlaceholders makes sandbox id's placeholders: name to an opaque
// token, unguessable, the same length whatever the secret. With a CA they
// are derived from its key, so that a sandbox keeps its placeholders when
// the daemon restarts and attaches it again; without one, random.
func newPlaceholders(ca *CA, id string, secrets []compiledSecret) map[string]string {
	ph := map[string]string{}
	for _, s := range secrets {
		if s.Name == "" {
			continue
		}
		var b []byte
		if ca != nil {
			m := hmac.New(sha256.New, ca.placeholderKey())
			m.Write([]byte(id + "\x00" + s.Name))
			b = m.Sum(nil)[:16]
		} else {
			b = make([]byte, 16)
			_, _ = rand.Read(b)
		}
		ph[s.Name] = "airlock-placeholder-" + strings.ToLower(s.Name) + "-" + hex.EncodeToString(b)
	}
	return ph
}

// vet applies the method and path rules and the secrets to a request for
// d's host, in place. It reports false, with d refused, when the request
// may not go.
func (s *Sandbox) vet(d *decision, method string, u *url.URL, h http.Header) bool {
	d.path = u.Path
	rs := s.rules.Load()
	if rule, reason := rs.checkL7(d.host, method, u); rule != "" {
		d.v = Verdict{Rule: rule}
		d.status, d.reason = http.StatusForbidden, reason
		return false
	}
	if f := s.p.opts.PolicyRequest; f != nil {
		if ok, rule, reason := f(s.ctx, s.id, d.host, d.port, method, u.Path); !ok {
			d.v = Verdict{Rule: "policy " + rule}
			d.status, d.reason = http.StatusForbidden, reason
			return false
		}
	}
	secrets := s.secretsFor(d.host)
	// A placeholder bound for a host its secret is not for: refused, so
	// that the attempt shows (the secret itself could not leave anyway).
	var carried []compiledSecret
	for _, sec := range rs.secrets {
		tok := s.placeholders[sec.Name]
		if tok == "" || !carries(u, h, tok) {
			continue
		}
		if !sec.forHost(d.host) {
			d.v = Verdict{Rule: "secret-host " + sec.Name}
			d.status = http.StatusForbidden
			d.reason = fmt.Sprintf("the request carries the placeholder of secret %s, which is only for %s", sec.Name, strings.Join(sec.hosts, ", "))
			return false
		}
		carried = append(carried, sec)
	}
	if len(secrets) > 0 && !secretMethods[method] {
		d.v = Verdict{Rule: "secret-method"}
		d.status = http.StatusForbidden
		d.reason = fmt.Sprintf("%s requests are not sent to %s, which gets an injected secret (a server may reflect them); use GET, HEAD, POST, PUT, PATCH or DELETE", method, d.host)
		return false
	}
	for _, sec := range carried {
		tok := s.placeholders[sec.Name]
		for name, vals := range h {
			for i, v := range vals {
				if strings.Contains(v, tok) {
					h[name][i] = strings.ReplaceAll(v, tok, string(sec.Value))
				}
			}
		}
		d.secrets = append(d.secrets, sec.label())
	}
	for _, sec := range secrets {
		if sec.Header == "" {
			continue
		}
		h.Set(sec.Header, sec.headerValue())
		if !slices.Contains(d.secrets, sec.label()) {
			d.secrets = append(d.secrets, sec.label())
		}
	}
	return true
}

// carries reports whether tok appears in the request's headers or URL.
func carries(u *url.URL, h http.Header, tok string) bool {
	if strings.Contains(u.RawQuery, tok) || strings.Contains(u.Path, tok) || strings.Contains(u.RawPath, tok) {
		return true
	}
	for name, vals := range h {
		if strings.Contains(name, tok) {
			return true
		}
		for _, v := range vals {
			if strings.Contains(v, tok) {
				return true
			}
		}
	}
	return false
}

// intercepts reports whether the proxy decrypts the sandbox's HTTPS to
// host: it has a secret or a method and path rule for the sandbox.
func (rs *Rules) intercepts(host string) bool {
	for _, sec := range rs.secrets {
		if sec.forHost(host) {
			return true
		}
	}
	return slices.ContainsFunc(rs.l7, func(r l7Rule) bool { return r.matchesHost(host) })
}

// compile compiles n's rules with what the proxy adds for it: the daemon's
// method and path rules and n's own, and the secrets n may use (every
// unscoped one, and the scoped ones n names). A name n gives that the
// proxy does not have gives nothing: the daemon's configuration checks
// templates' names, and a sandbox reattached after a secret was removed
// keeps running without it.
func (p *Proxy) compile(n sandbox.Network) (*Rules, error) {
	rs, err := Compile(n)
	if err != nil {
		return nil, err
	}
	own, err := compileL7(n.Rules)
	if err != nil {
		return nil, err
	}
	rs.l7 = append(slices.Clone(p.l7), own...)
	for _, sec := range p.secrets {
		if !sec.Scoped || slices.Contains(n.Secrets, sec.Name) {
			rs.secrets = append(rs.secrets, sec)
		}
	}
	return rs, nil
}
