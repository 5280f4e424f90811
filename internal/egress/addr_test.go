package egress

import (
	"net/netip"
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		ip   string
		want string // "" means public; otherwise a prefix of the class
	}{
		{ip: "8.8.8.8"},
		{ip: "1.1.1.1"},
		{ip: "2606:4700::1111"},
		{ip: "169.254.169.254", want: "metadata"},
		{ip: "169.254.170.2", want: "metadata"},
		{ip: "100.100.100.200", want: "metadata"},
		{ip: "fd00:ec2::254", want: "metadata"},
		{ip: "0.0.0.0", want: "this-network"},
		{ip: "0.1.2.3", want: "this-network"},
		{ip: "10.0.0.1", want: "private"},
		{ip: "10.255.255.255", want: "private"},
		{ip: "172.16.0.1", want: "private"},
		{ip: "172.31.255.255", want: "private"},
		{ip: "172.32.0.1"},
		{ip: "192.168.1.1", want: "private"},
		{ip: "100.64.0.0", want: "cgnat"},
		{ip: "100.127.255.255", want: "cgnat"},
		{ip: "100.128.0.0"},
		{ip: "127.0.0.1", want: "loopback"},
		{ip: "127.255.255.254", want: "loopback"},
		{ip: "169.254.0.1", want: "link-local"},
		{ip: "192.0.0.1", want: "ietf-protocol"},
		{ip: "192.0.2.1", want: "documentation"},
		{ip: "198.51.100.1", want: "documentation"},
		{ip: "203.0.113.1", want: "documentation"},
		{ip: "192.88.99.1", want: "6to4-relay"},
		{ip: "198.18.0.1", want: "benchmark"},
		{ip: "198.19.255.255", want: "benchmark"},
		{ip: "198.20.0.1"},
		{ip: "224.0.0.1", want: "multicast"},
		{ip: "239.255.255.250", want: "multicast"},
		{ip: "255.255.255.255", want: "broadcast"},
		{ip: "240.0.0.1", want: "reserved"},
		{ip: "::", want: "unspecified"},
		{ip: "::1", want: "loopback"},
		{ip: "::ffff:127.0.0.1", want: "ipv4-mapped (embeds 127.0.0.1: loopback)"},
		{ip: "::ffff:7f00:1", want: "ipv4-mapped (embeds 127.0.0.1: loopback)"},
		{ip: "::ffff:10.0.0.1", want: "ipv4-mapped (embeds 10.0.0.1: private)"},
		{ip: "::ffff:169.254.169.254", want: "ipv4-mapped (embeds 169.254.169.254: metadata)"},
		{ip: "::ffff:8.8.8.8", want: "ipv4-mapped (embeds 8.8.8.8)"},
		{ip: "::127.0.0.1", want: "ipv4-compatible (embeds 127.0.0.1: loopback)"},
		{ip: "::ffff:0:7f00:1", want: "ipv4-translated"},
		{ip: "64:ff9b::7f00:1", want: "nat64 (embeds 127.0.0.1: loopback)"},
		{ip: "64:ff9b::a9fe:a9fe", want: "nat64 (embeds 169.254.169.254: metadata)"},
		{ip: "64:ff9b::808:808", want: "nat64 (embeds 8.8.8.8)"},
		{ip: "64:ff9b:1::1", want: "nat64"},
		{ip: "2002:7f00:1::1", want: "6to4 (embeds 127.0.0.1: loopback)"},
		{ip: "2002:a00:1::1", want: "6to4 (embeds 10.0.0.1: private)"},
		{ip: "2001:0:4136:e378:8000:63bf:80ff:fffe", want: "teredo (embeds 127.0.0.1: loopback)"},
		{ip: "2001:2::1", want: "benchmark"},
		{ip: "2001:db8::1", want: "documentation"},
		{ip: "3fff::1", want: "documentation"},
		{ip: "2001:10::1", want: "orchid"},
		{ip: "100::1", want: "discard"},
		{ip: "fc00::1", want: "ula"},
		{ip: "fd12:3456::1", want: "ula"},
		{ip: "fe80::1", want: "link-local"},
		{ip: "fe80::1%eth0", want: "link-local"},
		{ip: "fec0::1", want: "site-local"},
		{ip: "ff02::1", want: "multicast"},
		{ip: "4000::1", want: "not-global-unicast"},
	}
	for _, tt := range tests {
		t.Run(tt.ip, func(t *testing.T) {
			got := Classify(netip.MustParseAddr(tt.ip))
			if tt.want == "" && got != "" {
				t.Fatalf("Classify(%s) = %q, want public", tt.ip, got)
			}
			if tt.want != "" && !strings.HasPrefix(got, tt.want) {
				t.Fatalf("Classify(%s) = %q, want %q", tt.ip, got, tt.want)
			}
		})
	}
}

func TestParseIP(t *testing.T) {
	tests := []struct {
		host string
		want string // "" means not an IP literal
	}{
		{host: "127.0.0.1", want: "127.0.0.1"},
		{host: "2130706433", want: "127.0.0.1"},
		{host: "0177.0.0.1", want: "127.0.0.1"},
		{host: "0x7f000001", want: "127.0.0.1"},
		{host: "0x7f.0.0.1", want: "127.0.0.1"},
		{host: "127.1", want: "127.0.0.1"},
		{host: "127.0.1", want: "127.0.0.1"},
		{host: "0", want: "0.0.0.0"},
		{host: "169.254.43518", want: "169.254.169.254"},
		{host: "0xa9fea9fe", want: "169.254.169.254"},
		{host: "[::1]", want: "::1"},
		{host: "::ffff:127.0.0.1", want: "127.0.0.1"},
		{host: "[::ffff:7f00:1]", want: "127.0.0.1"},
		{host: "fe80::1%25eth0", want: "fe80::1"},
		{host: "fe80::1%eth0", want: "fe80::1"},
		{host: "64:ff9b::7f00:1", want: "64:ff9b::7f00:1"},
		{host: "example.com"},
		{host: "1.2.3.4.5"},
		{host: "256.1.1.1"},
		{host: "1.2.3.256"},
		{host: "08.1.1.1"},
		{host: "0x", want: "0.0.0.0"}, // glibc accepts it too
		{host: "4294967296"},
		{host: "a1.example"},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			ip, ok := ParseIP(tt.host)
			switch {
			case tt.want == "" && ok:
				t.Fatalf("ParseIP(%q) = %s, want not an IP", tt.host, ip)
			case tt.want != "" && (!ok || ip.String() != tt.want):
				t.Fatalf("ParseIP(%q) = %s, %v; want %s", tt.host, ip, ok, tt.want)
			}
			if ok && tt.want != "fe80::1" && tt.want != "64:ff9b::7f00:1" && Classify(ip) == "" {
				t.Fatalf("%q parses to %s, which is not blocked", tt.host, ip)
			}
		})
	}
}
