package egress

import (
	"crypto/sha256"
	"testing"
	"time"
)

func TestGrantsRoundTripAndMatchHostsExactly(t *testing.T) {
	key := testKey("k")
	now := time.Unix(1_800_000_000, 0)
	g := Grant{Tool: "t", PodIP: "10.0.0.1", Expires: now.Add(time.Minute).Unix(), Hosts: []Host{
		{Name: "api.example.com"}, {Name: "*.example.org", Ports: []int32{8443}}, {Name: "example.org", Ports: []int32{443}},
		{Name: "2001:db8::1"},
	}}
	tok, err := Mint(key, g)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Verify([][]byte{testKey("old"), key}, tok, now)
	if err != nil || back.PodIP != g.PodIP || len(back.Hosts) != 4 {
		t.Fatalf("Verify: %+v %v", back, err)
	}
	if _, err := Verify([][]byte{key}, tok, now.Add(time.Minute)); err != ErrExpired {
		t.Errorf("at expiry: %v, want ErrExpired", err)
	}
	for _, tc := range []struct {
		name string
		port int32
		want string
	}{
		{"api.example.com", 443, "api.example.com"}, {"API.Example.com.", 443, "api.example.com"},
		{"api.example.com", 80, ""}, {"x.api.example.com", 443, ""},
		{"a.example.org", 8443, "*.example.org"}, {"a.b.example.org", 8443, "*.example.org"}, {"a.example.org", 443, ""},
		{"example.org", 443, "example.org"}, {"example.org", 8443, ""}, {"badexample.org", 8443, ""},
		// An IPv6 address, however the body writes it.
		{"2001:db8::1", 443, "2001:db8::1"}, {"2001:DB8:0::1", 443, "2001:db8::1"}, {"[2001:db8::1]", 443, "2001:db8::1"},
		{"2001:db8::2", 443, ""}, {"2001:db8::1", 80, ""},
	} {
		h := g.Match(tc.name, tc.port)
		got := ""
		if h != nil {
			got = h.Name
		}
		if got != tc.want {
			t.Errorf("Match(%s, %d) = %q, want %q", tc.name, tc.port, got, tc.want)
		}
	}
}

// testKey is a grant key of KeySize bytes named by seed (the manager
// derives its own: keys.GrantKey).
func testKey(seed string) []byte {
	sum := sha256.Sum256([]byte(seed))
	return sum[:]
}
