package egress

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"time"
)

// Grant is what one attempt's body may reach.
type Grant struct {
	// Namespace, Call, CallUID and Tool name the call (the namespace is
	// where its credentials' Secrets are read; the proxy's Events regard
	// the call).
	Namespace string `json:"ns"`
	Call      string `json:"call"`
	CallUID   string `json:"uid,omitempty"`
	Tool      string `json:"tool"`
	// PodUID and PodIP are the attempt's pod: a request is believed only
	// from that address while that pod lives.
	PodUID string `json:"pod"`
	PodIP  string `json:"ip"`
	// Hosts the body may reach.
	Hosts []Host `json:"hosts"`
	// Expires is when the grant is worth nothing (Unix seconds).
	Expires int64 `json:"exp"`
}

// Host is one destination of a grant.
type Host struct {
	// Name is an exact name or address, or "*." and a name.
	Name string `json:"name"`
	// Ports allowed (443 when empty).
	Ports []int32 `json:"ports,omitempty"`
	// Credential, when set, is added to every request to the host.
	Credential *Credential `json:"cred,omitempty"`
	// CABundle, when set, is the PEM the proxy trusts for the host instead
	// of its roots (TLS it opens itself).
	CABundle string `json:"ca,omitempty"`
}

// Credential is a header whose value is read from a Secret of the grant's
// namespace.
type Credential struct {
	Header string `json:"header"`
	Secret string `json:"secret"`
	Key    string `json:"key"`
	// Format holds "{{value}}" where the Secret's value goes ("" is the
	// value alone).
	Format string `json:"format,omitempty"`
}

// DefaultPort is the port of a host that names none.
const DefaultPort = 443

// KeySize is the size of a grant-signing key.
const KeySize = 32

// tokenVersion prefixes every token; a token of another version is refused.
const tokenVersion = "g1"

// Mint signs g with key.
func Mint(key []byte, g Grant) (string, error) {
	body, err := json.Marshal(g)
	if err != nil {
		return "", err
	}
	payload := tokenVersion + "." + base64.RawURLEncoding.EncodeToString(body)
	return payload + "." + base64.RawURLEncoding.EncodeToString(sign(key, payload)), nil
}

func sign(key []byte, payload string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(payload))
	return m.Sum(nil)
}

// Errors of Verify.
var (
	ErrBadToken = errors.New("the proxy credentials are not a grant toolgate signed")
	ErrExpired  = errors.New("the grant has expired")
)

// Verify returns the grant a token carries when one of keys signed it and
// it has not expired at now.
func Verify(keys [][]byte, token string, now time.Time) (Grant, error) {
	version, rest, ok := strings.Cut(token, ".")
	body, mac, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || version != tokenVersion {
		return Grant{}, ErrBadToken
	}
	got, err := base64.RawURLEncoding.DecodeString(mac)
	if err != nil {
		return Grant{}, ErrBadToken
	}
	signed := false
	for _, k := range keys {
		if len(k) == KeySize && hmac.Equal(got, sign(k, version+"."+body)) {
			signed = true
			break
		}
	}
	if !signed {
		return Grant{}, ErrBadToken
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		return Grant{}, ErrBadToken
	}
	var g Grant
	if err := json.Unmarshal(raw, &g); err != nil {
		return Grant{}, ErrBadToken
	}
	if now.Unix() >= g.Expires {
		return Grant{}, ErrExpired
	}
	return g, nil
}

// Match is the grant's host that name and port fall under (nil: none).
// An exact name wins over a wildcard; "*.example.com" covers every name
// below example.com, not example.com itself.
func (g Grant) Match(name string, port int32) *Host {
	name = canonical(name)
	var wild *Host
	for i := range g.Hosts {
		h := &g.Hosts[i]
		if !covers(h.Name, name) || !allowsPort(h.Ports, port) {
			continue
		}
		if h.Name == name {
			return h
		}
		if wild == nil {
			wild = h
		}
	}
	return wild
}

// Named tells whether the grant names host at all, whatever the port.
func (g Grant) Named(name string) bool {
	name = canonical(name)
	for _, h := range g.Hosts {
		if covers(h.Name, name) {
			return true
		}
	}
	return false
}

// canonical is name as hosts are declared: lowercase without a final
// dot, an address in its canonical form (IPv6 compressed, no brackets).
func canonical(name string) string {
	name = strings.Trim(name, "[]")
	if a, err := netip.ParseAddr(name); err == nil {
		return a.String()
	}
	return strings.ToLower(strings.TrimSuffix(name, "."))
}

// covers tells whether a declared host (exact, or "*." and a name)
// covers name.
func covers(declared, name string) bool {
	if suffix, ok := strings.CutPrefix(declared, "*"); ok {
		return strings.HasSuffix(name, suffix) && len(name) > len(suffix)
	}
	return declared == name
}

func allowsPort(ports []int32, port int32) bool {
	if len(ports) == 0 {
		return port == DefaultPort
	}
	for _, p := range ports {
		if p == port {
			return true
		}
	}
	return false
}
