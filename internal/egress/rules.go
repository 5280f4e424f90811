package egress

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Rules is one sandbox's compiled network policy.
type Rules struct {
	allow   []hostRule
	deny    []hostRule
	denyIPs []netip.Prefix
	addrs   map[netip.AddrPort]bool
	report  bool

	// l7 are the method and path rules for the sandbox, the daemon's and
	// its network's; secrets are those it may use. (Proxy.compile sets
	// them; Compile alone leaves them empty.)
	l7      []l7Rule
	secrets []compiledSecret
}

// hostRule is one host pattern with an optional port.
type hostRule struct {
	text     string // as given, for the log and the 403 body
	name     string // lower case; "*.x" is a wildcard
	port     int    // 0: 80 and 443 for allows, any for denies
	wildcard bool
}

func (r hostRule) matches(host string, port int, allow bool) bool {
	switch {
	case r.port != 0 && r.port != port:
		return false
	case r.port == 0 && allow && port != 80 && port != 443:
		return false
	}
	if r.wildcard {
		return strings.HasSuffix(host, r.name[1:]) // ".example.com"
	}
	return host == r.name
}

// Compile turns a sandbox's Network into Rules. n must be valid.
func Compile(n sandbox.Network) (*Rules, error) {
	if err := n.Validate(); err != nil {
		return nil, err
	}
	r := &Rules{addrs: map[netip.AddrPort]bool{}, report: n.Report}
	parse := func(p string) (hostRule, error) {
		name, port, err := sandbox.ParseHostPattern(p)
		return hostRule{text: p, name: name, port: port, wildcard: strings.HasPrefix(name, "*.")}, err
	}
	for _, h := range n.AllowHosts {
		hr, err := parse(h)
		if err != nil {
			return nil, err
		}
		r.allow = append(r.allow, hr)
	}
	for _, a := range n.AllowAddresses {
		ap, err := netip.ParseAddrPort(a)
		if err != nil {
			return nil, fmt.Errorf("allow address %q: %w", a, err)
		}
		r.addrs[netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())] = true
	}
	for _, d := range n.Deny {
		if p, err := netip.ParsePrefix(d); err == nil {
			r.denyIPs = append(r.denyIPs, p.Masked())
			continue
		}
		if ip, err := netip.ParseAddr(d); err == nil {
			r.denyIPs = append(r.denyIPs, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			continue
		}
		hr, err := parse(d)
		if err != nil {
			return nil, err
		}
		r.deny = append(r.deny, hr)
	}
	return r, nil
}

// Verdict is the outcome of checking a destination.
type Verdict struct {
	// Allow says the connection may go ahead (in report mode also when
	// WouldDeny is set).
	Allow bool
	// WouldDeny is set in report mode for what enforce mode refuses.
	WouldDeny bool
	// Rule names the rule that decided: "allow-host *.pypi.org:443",
	// "deny 10.0.0.0/8", "not-allowlisted", "ip-literal", "blocked loopback".
	Rule string
}

// checkName decides on a requested host (a name or an IP literal, already
// lower case without brackets) and port, before anything is resolved.
func (r *Rules) checkName(host string, port int) Verdict {
	v := r.checkNameStrict(host, port)
	if !v.Allow && r.report {
		v.Allow, v.WouldDeny = true, true
	}
	return v
}

func (r *Rules) checkNameStrict(host string, port int) Verdict {
	for _, d := range r.deny {
		if d.matches(host, port, false) {
			return Verdict{Rule: "deny " + d.text}
		}
	}
	if ip, ok := ParseIP(host); ok {
		if v := r.denyIP(ip); v != nil {
			return *v
		}
		ap := netip.AddrPortFrom(ip, uint16(port))
		if r.addrs[ap] {
			return Verdict{Allow: true, Rule: "allow-address " + ap.String()}
		}
		return Verdict{Rule: "ip-literal " + ap.String() + " not in allow-address"}
	}
	for _, a := range r.allow {
		if a.matches(host, port, true) {
			return Verdict{Allow: true, Rule: "allow-host " + a.text}
		}
	}
	return Verdict{Rule: fmt.Sprintf("not-allowlisted %s:%d", host, port)}
}

func (r *Rules) denyIP(ip netip.Addr) *Verdict {
	for _, p := range r.denyIPs {
		if p.Contains(ip.Unmap()) {
			return &Verdict{Rule: "deny " + p.String()}
		}
	}
	return nil
}

// checkAddr decides on the address a connection is about to be made to.
// The private-range block holds in report mode too; deny rules do not.
func (r *Rules) checkAddr(ap netip.AddrPort) Verdict {
	ip := ap.Addr().WithZone("")
	deny := r.denyIP(ip)
	if deny != nil && !r.report {
		return *deny
	}
	if r.addrs[ap] {
		if deny != nil {
			return Verdict{Allow: true, WouldDeny: true, Rule: deny.Rule}
		}
		return Verdict{Allow: true, Rule: "allow-address " + ap.String()}
	}
	if c := Classify(ip); c != "" {
		return Verdict{Rule: "blocked " + c}
	}
	if deny != nil {
		return Verdict{Allow: true, WouldDeny: true, Rule: deny.Rule}
	}
	return Verdict{Allow: true, Rule: "public"}
}
