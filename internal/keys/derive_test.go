package keys

import (
	"encoding/hex"
	"testing"
)

// TestDerivationsAreStable: every use of the manager's key gives, for a
// known key, what it gave before the uses moved here (known answers): a
// pod sealed, a question asked or an audit record written before an
// upgrade verifies after it.
func TestDerivationsAreStable(t *testing.T) {
	secret := []byte("toolgate known-answer secret, 32")
	for _, c := range []struct{ name, got, want string }{
		{"question", hex.EncodeToString(MAC(secret, UseQuestion, "a", "", "b\x00c")), "dbbcd56e0e0c0685e5c53906d6acb612c609c27523d3146552b04e9c8fe3b0fa"},
		{"arguments", Digest(secret, UseArguments, `{"a":1}`), "hmac-sha256:4325e96cd114a5c7f63b90d49a8329693ddb8bcc292fb887d43e676c18a55886"},
		{"result", Digest(secret, UseResult, "v", "c"), "hmac-sha256:c878042864f802e8c3107785df599b23462510c8e89ad2eb52894341f319359f"},
		{"key id", KeyID(secret), "key-0cbff8fc897931c6"},
		{"pod seal", hex.EncodeToString(PodSeal(secret, "ns", "p", "u-1")), "0c86ca2ce2b418616ccbbe2c5ed781c17fa2965dc3fdf3ff2c6786da24dbf5fa"},
		{"egress grant", hex.EncodeToString(GrantKey(secret)), "9419470e63af70d108acc80b5e107306c70f3cd383ad432a79e10b65468e238c"},
	} {
		if c.got != c.want {
			t.Errorf("%s: %s, want %s (what it was before: a change breaks what was made under it)", c.name, c.got, c.want)
		}
	}
}

// TestEachUseHasItsOwnKey: the same parts under two uses never give the
// same MAC.
func TestEachUseHasItsOwnKey(t *testing.T) {
	secret := []byte("k")
	seen := map[string]string{}
	for _, use := range []string{UsePodSeal, UseQuestion, UseArguments, UseResult, UseKeyID} {
		got := hex.EncodeToString(MAC(secret, use, "x"))
		if other, ok := seen[got]; ok {
			t.Fatalf("%s and %s share a key", use, other)
		}
		seen[got] = use
	}
}
