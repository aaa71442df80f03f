package egress

import (
	"net/netip"
)

// notPublic are the ranges the proxy never reaches unless the operator
// allows one (--allow-private): where a cluster keeps its nodes, pods and
// Services, and every other range that is not the internet (RFC 6890's
// special-purpose registries). A name whose answer falls in one could
// otherwise smuggle an in-cluster address past the host list.
var notPublic = prefixes(
	"0.0.0.0/8", "10.0.0.0/8", "127.0.0.0/8", "::1/128", "100.64.0.0/10", "172.16.0.0/12", "192.0.0.0/24",
	"192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24",
	"203.0.113.0/24", "240.0.0.0/4",
	// NAT64 and IPv4-translated forms reach IPv4 ranges through a gateway.
	"64:ff9b::/96", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32", "2002::/16", "fc00::/7",
)

// never are reached whatever the operator allows: link-local (where
// clouds serve instance metadata and credentials), multicast and the
// unspecified address. Loopback (the proxy's own pod) is not public, and
// allowed only by name (127.0.0.0/8).
func never(a netip.Addr) bool {
	return a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() || !a.IsValid()
}

// Permitted tells whether the proxy may connect to a: a public address, or
// one in a range the operator allowed.
func Permitted(a netip.Addr, allowed []netip.Prefix) bool {
	a = a.Unmap()
	if never(a) {
		return false
	}
	for _, p := range allowed {
		if p.Contains(a) {
			return true
		}
	}
	for _, p := range notPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}
