package egress

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// blockedRange is one address range no sandbox may reach unless an
// allow-address entry names the exact IP:port.
type blockedRange struct {
	prefix netip.Prefix
	name   string
}

// blocked lists the ranges in the order they are reported: the most specific
// (metadata services) first.
var blocked = func() []blockedRange {
	var rs []blockedRange
	add := func(name string, prefixes ...string) {
		for _, p := range prefixes {
			rs = append(rs, blockedRange{netip.MustParsePrefix(p), name})
		}
	}
	add("metadata", "169.254.169.254/32", "169.254.170.2/32", "100.100.100.200/32", "fd00:ec2::254/128", "192.0.0.192/32")
	// IPv4.
	add("this-network", "0.0.0.0/8")
	add("private", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
	add("cgnat", "100.64.0.0/10")
	add("loopback", "127.0.0.0/8")
	add("link-local", "169.254.0.0/16")
	add("ietf-protocol", "192.0.0.0/24")
	add("documentation", "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")
	add("6to4-relay", "192.88.99.0/24")
	add("benchmark", "198.18.0.0/15")
	add("multicast", "224.0.0.0/4")
	add("broadcast", "255.255.255.255/32")
	add("reserved", "240.0.0.0/4")
	// IPv6.
	add("unspecified", "::/128")
	add("loopback", "::1/128")
	add("ipv4-mapped", "::ffff:0:0/96")
	add("ipv4-compatible", "::/96")
	add("ipv4-translated", "::ffff:0:0:0/96")
	add("nat64", "64:ff9b::/96", "64:ff9b:1::/48")
	add("discard", "100::/64")
	add("teredo", "2001::/32")
	add("benchmark", "2001:2::/48")
	add("orchid", "2001:10::/28", "2001:20::/28")
	add("documentation", "2001:db8::/32", "3fff::/20")
	add("6to4", "2002::/16")
	add("ula", "fc00::/7")
	add("link-local", "fe80::/10")
	add("site-local", "fec0::/10")
	add("multicast", "ff00::/8")
	return rs
}()

// Classify says why ip must not be reached, or "" when it is a public
// unicast address. IPv4 addresses embedded in IPv6 (mapped, compatible,
// NAT64, 6to4, Teredo) are named with the embedded address's class, and are
// refused whatever it is: the proxy never dials through a translation
// prefix. Zones are ignored.
func Classify(ip netip.Addr) string {
	ip = ip.WithZone("")
	if !ip.IsValid() {
		return "invalid"
	}
	for _, r := range blocked {
		if !r.prefix.Contains(ip) {
			continue
		}
		if v4, ok := embeddedV4(ip); ok {
			if inner := Classify(v4); inner != "" {
				return fmt.Sprintf("%s (embeds %s: %s)", r.name, v4, inner)
			}
			return fmt.Sprintf("%s (embeds %s)", r.name, v4)
		}
		return r.name
	}
	if ip.Is6() && !netip.MustParsePrefix("2000::/3").Contains(ip) {
		return "not-global-unicast"
	}
	return ""
}

// embeddedV4 returns the IPv4 address that a translation form of IPv6
// carries.
func embeddedV4(ip netip.Addr) (netip.Addr, bool) {
	if !ip.Is6() {
		return netip.Addr{}, false
	}
	b := ip.As16()
	switch {
	case netip.MustParsePrefix("::ffff:0:0/96").Contains(ip),
		netip.MustParsePrefix("::/96").Contains(ip) && ip != netip.IPv6Unspecified() && ip != netip.IPv6Loopback(),
		netip.MustParsePrefix("64:ff9b::/96").Contains(ip),
		netip.MustParsePrefix("::ffff:0:0:0/96").Contains(ip):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case netip.MustParsePrefix("2002::/16").Contains(ip):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	case netip.MustParsePrefix("2001::/32").Contains(ip):
		// Teredo: the client's address is the last 32 bits, inverted.
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}), true
	}
	return netip.Addr{}, false
}

// ParseIP parses host as an IP address in every notation a client library
// might accept: dotted IPv4, IPv6 (with or without brackets and zone), and
// the inet_aton forms glibc resolves without DNS — decimal (2130706433),
// octal (0177.0.0.1), hex (0x7f000001) and short (127.1). A host that
// parses is an IP literal and must be named by an allow-address entry.
func ParseIP(host string) (netip.Addr, bool) {
	h := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if ip, err := netip.ParseAddr(h); err == nil {
		return ip.Unmap().WithZone(""), true
	}
	return parseInetAton(h)
}

// parseInetAton parses the 1-4 part numeric forms of inet_aton(3), each
// part decimal, octal (leading 0) or hex (leading 0x).
func parseInetAton(s string) (netip.Addr, bool) {
	s = strings.TrimSuffix(s, ".")
	parts := strings.Split(s, ".")
	if s == "" || len(parts) > 4 {
		return netip.Addr{}, false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		base := 10
		switch {
		case len(p) > 2 && (p[:2] == "0x" || p[:2] == "0X"):
			p, base = p[2:], 16
		case p == "0x" || p == "0X":
			p, base = "0", 16
		case len(p) > 1 && p[0] == '0':
			p, base = p[1:], 8
		}
		v, err := strconv.ParseUint(p, base, 32)
		if err != nil {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	// The last part fills the remaining bytes.
	var out uint64
	for i, v := range vals[:len(vals)-1] {
		if v > 255 {
			return netip.Addr{}, false
		}
		out |= v << (8 * (3 - i))
	}
	last := vals[len(vals)-1]
	if last >= 1<<(8*(5-len(vals))) {
		return netip.Addr{}, false
	}
	out |= last
	return netip.AddrFrom4([4]byte{byte(out >> 24), byte(out >> 16), byte(out >> 8), byte(out)}), true
}
