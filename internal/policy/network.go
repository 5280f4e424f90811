package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Network bounds the egress of every sandbox, when a policy file has a
// [network] section:
//
//	[network]
//	allow = ["pypi.org:443", "*.pythonhosted.org:443", "10.1.2.3:443"]
//	deny  = ["evil.pypi.org", "10.0.0.0/8"]
//
// Allow entries are host patterns as a template's allow_hosts takes them
// (without a port: 80 and 443) or exact IP:PORT addresses. Deny entries are
// host patterns, IPs or CIDR prefixes.
//
//   - A create whose network (the template's, or the one it asks for) lets
//     the sandbox reach a host or address that allow does not cover, or is
//     in report mode, is denied (rule "network"). An empty allow means no
//     egress at all.
//   - The deny entries are added to the deny rules of every sandbox with
//     egress, so they hold at the proxy's dial time too, on resolved
//     addresses.
//   - Every request through the egress proxy is decided again: one to a
//     host and port outside allow, or matching deny, is denied (rule
//     "network"); then the rules see it as action "egress" with host and
//     port. An egress request cannot wait for a person, so "ask" denies it.
//
// Without a [network] section the templates alone bound egress; rules on
// action "egress" still decide each request.
type Network struct {
	Allow []string `toml:"allow"`
	Deny  []string `toml:"deny"`
}

// check refuses entries the egress proxy could not enforce.
func (n *Network) check() error {
	if n == nil {
		return nil
	}
	for _, a := range n.Allow {
		if _, ok := allowAddr(a); ok {
			continue
		}
		if _, _, err := sandbox.ParseHostPattern(a); err != nil {
			return fmt.Errorf("network allow %q: give a host pattern (pypi.org:443, *.example.com) or an IP:PORT address", a)
		}
	}
	if err := (sandbox.Network{Mode: sandbox.NetworkEgress, Deny: n.Deny}).Validate(); err != nil {
		return fmt.Errorf("network deny: %w", err)
	}
	return nil
}

// allowAddr parses an IP:PORT allow entry.
func allowAddr(a string) (netip.AddrPort, bool) {
	ap, err := netip.ParseAddrPort(a)
	if err != nil || ap.Port() == 0 || ap.Addr().Zone() != "" {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), true
}

// hostPatterns are the host-pattern entries of allow (not addresses).
func (n *Network) hostPatterns() []string {
	var out []string
	for _, a := range n.Allow {
		if _, ok := allowAddr(a); !ok {
			out = append(out, a)
		}
	}
	return out
}

func (n *Network) allowsAddr(ap netip.AddrPort) bool {
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	for _, a := range n.Allow {
		if x, ok := allowAddr(a); ok && x == ap {
			return true
		}
	}
	return false
}

// wider lists what the sandbox network sn allows that n does not.
func (n *Network) wider(sn sandbox.Network) []string {
	if sn.Mode != sandbox.NetworkEgress {
		return nil
	}
	var out []string
	if sn.Report {
		out = append(out, "report mode (it lets through what the rules refuse)")
	}
	for _, h := range sn.AllowHosts {
		if !sandbox.PatternCovered(h, n.hostPatterns()) {
			out = append(out, "host "+h)
		}
	}
	for _, a := range sn.AllowAddresses {
		ap, err := netip.ParseAddrPort(a)
		if err != nil || !n.allowsAddr(ap) {
			out = append(out, "address "+a)
		}
	}
	return out
}

// egress decides a request to host (a name or an IP literal) on port: ""
// when n allows it, else why not.
func (n *Network) egress(host string, port int) string {
	host = strings.ToLower(strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), "."))
	ip, ipErr := netip.ParseAddr(host)
	for _, d := range n.Deny {
		if p, err := netip.ParsePrefix(d); err == nil {
			if ipErr == nil && p.Contains(ip.Unmap()) {
				return fmt.Sprintf("%s is in the policy's network deny %s", host, d)
			}
			continue
		}
		if a, err := netip.ParseAddr(d); err == nil {
			if ipErr == nil && a.Unmap() == ip.Unmap() {
				return fmt.Sprintf("%s is on the policy's network deny list", host)
			}
			continue
		}
		// A deny pattern without a port denies every port.
		name, dport, err := sandbox.ParseHostPattern(d)
		if err != nil || (dport != 0 && dport != port) {
			continue
		}
		if host == name || (strings.HasPrefix(name, "*.") && strings.HasSuffix(host, name[1:])) {
			return fmt.Sprintf("%s matches the policy's network deny %s", host, d)
		}
	}
	if ipErr == nil {
		if n.allowsAddr(netip.AddrPortFrom(ip, uint16(port))) {
			return ""
		}
		return fmt.Sprintf("%s:%d is not on the policy's network allowlist", host, port)
	}
	for _, p := range n.hostPatterns() {
		if sandbox.PatternMatches(p, host, port) {
			return ""
		}
	}
	return fmt.Sprintf("%s:%d is not on the policy's network allowlist", host, port)
}

// Network returns the policy's [network] section; nil when it has none.
func (p *Policy) Network() *Network { return p.f.Network }

// NarrowNetwork adds the policy's network deny entries to n, a sandbox's
// network with egress, so that they also hold on the addresses the proxy
// resolves and dials.
func (p *Policy) NarrowNetwork(n *sandbox.Network) {
	if p.f.Network == nil || n.Mode != sandbox.NetworkEgress {
		return
	}
	for _, d := range p.f.Network.Deny {
		if !slices.Contains(n.Deny, d) {
			n.Deny = append(n.Deny, d)
		}
	}
}
