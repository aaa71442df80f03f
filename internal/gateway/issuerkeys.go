package gateway

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"hash"
	"math/big"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
)

// A made-up token shaped well (a JWT naming the audience, unexpired) would
// still cost a TokenReview; enough of them, from enough addresses, spend
// the review budget valid callers need. The API server publishes the keys
// that sign ServiceAccount tokens (/openid/v1/jwks, readable by every
// ServiceAccount through system:service-account-issuer-discovery): a token
// whose signature none of them verifies is refused without a review. The
// TokenReview still decides every token that passes (revocation, the
// bound pod, the audience).
const (
	// keysFresh is how long fetched keys are trusted to be all the keys: a
	// token naming a key not among them is refused.
	keysFresh = time.Minute
	// keysRefetch is how often keys are fetched again when a token names
	// one not known, or they are older than keysFresh.
	keysRefetch = 10 * time.Second
)

// issuerKeys verifies ServiceAccount tokens' signatures locally with the
// keys fetch returns (a JWK set). Until keys are fetched, or when a token
// names a key fetched longer than keysFresh ago, it cannot tell, and the
// token goes to review.
type issuerKeys struct {
	fetch func(ctx context.Context) ([]byte, error)
	clock clock.PassiveClock
	log   logr.Logger

	mu       sync.Mutex
	keys     map[string]crypto.PublicKey
	fetched  time.Time // when keys were last fetched
	tried    time.Time // when a fetch was last started
	fetching bool
}

// signatureProblem says why token's signature is not the cluster's, or ""
// when it is, or when that cannot be told now (a fetch is then started);
// verified says a known key verified it.
func (k *issuerKeys) signatureProblem(t decodedJWT, now time.Time) (problem string, verified bool) {
	var h struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	if json.Unmarshal(t.header, &h) != nil {
		return "not a ServiceAccount token (a JWT)", false
	}
	k.mu.Lock()
	key, known := k.keys[h.Kid]
	fresh := !k.fetched.IsZero() && now.Sub(k.fetched) < keysFresh
	if !known || !fresh {
		k.startFetch(now)
	}
	k.mu.Unlock()
	switch {
	case !known && fresh:
		return "not signed by a key of the cluster's ServiceAccount issuer", false
	case !known:
		return "", false // cannot tell yet: the TokenReview decides
	}
	if !verifies(key, h.Alg, t.signed, t.sig) {
		return "not signed by a key of the cluster's ServiceAccount issuer", false
	}
	return "", true
}

// startFetch starts a fetch unless one is under way or one started within
// keysRefetch. The caller holds k.mu.
func (k *issuerKeys) startFetch(now time.Time) {
	if k.fetching || (!k.tried.IsZero() && now.Sub(k.tried) < keysRefetch) {
		return
	}
	k.fetching, k.tried = true, now
	go k.refresh()
}

// refresh fetches the keys once; a failure keeps the keys known before.
func (k *issuerKeys) refresh() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body, err := k.fetch(ctx)
	var keys map[string]crypto.PublicKey
	if err == nil {
		keys, err = parseJWKS(body)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.fetching = false
	if err != nil {
		// Tokens then go to review, as before keys were known.
		k.log.Error(err, "issuer keys not fetched")
		return
	}
	k.keys, k.fetched = keys, k.clock.Now()
}

// parseJWKS reads the RSA and EC keys of a JWK set by their key IDs.
func parseJWKS(body []byte) (map[string]crypto.PublicKey, error) {
	var set struct {
		Keys []struct {
			Kty string `json:"kty"`
			Kid string `json:"kid"`
			N   string `json:"n"`
			E   string `json:"e"`
			Crv string `json:"crv"`
			X   string `json:"x"`
			Y   string `json:"y"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, err
	}
	out := map[string]crypto.PublicKey{}
	num := func(s string) (*big.Int, error) {
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil || len(b) == 0 {
			return nil, errors.New("a key number is not base64url")
		}
		return new(big.Int).SetBytes(b), nil
	}
	for _, j := range set.Keys {
		switch j.Kty {
		case "RSA":
			n, err := num(j.N)
			if err != nil {
				return nil, err
			}
			e, err := num(j.E)
			if err != nil || !e.IsInt64() || e.Int64() > 1<<31 {
				return nil, errors.New("an RSA exponent is not one")
			}
			out[j.Kid] = &rsa.PublicKey{N: n, E: int(e.Int64())}
		case "EC":
			var curve elliptic.Curve
			switch j.Crv {
			case "P-256":
				curve = elliptic.P256()
			case "P-384":
				curve = elliptic.P384()
			case "P-521":
				curve = elliptic.P521()
			default:
				continue
			}
			x, err := num(j.X)
			if err != nil {
				return nil, err
			}
			y, err := num(j.Y)
			if err != nil {
				return nil, err
			}
			size := (curve.Params().BitSize + 7) / 8
			if len(x.Bytes()) > size || len(y.Bytes()) > size {
				return nil, errors.New("an EC key's point is off its curve")
			}
			point := append(append([]byte{4}, x.FillBytes(make([]byte, size))...), y.FillBytes(make([]byte, size))...)
			pub, err := ecdsa.ParseUncompressedPublicKey(curve, point)
			if err != nil {
				return nil, err
			}
			out[j.Kid] = pub
		}
	}
	if len(out) == 0 {
		return nil, errors.New("the issuer publishes no RSA or EC key")
	}
	return out, nil
}

// verifies reports whether sig signs signed under key with alg (the
// algorithms the API server signs ServiceAccount tokens with).
func verifies(key crypto.PublicKey, alg, signed string, sig []byte) bool {
	digest := func(h hash.Hash) []byte {
		h.Write([]byte(signed))
		return h.Sum(nil)
	}
	switch pub := key.(type) {
	case *rsa.PublicKey:
		switch alg {
		case "RS256":
			return rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest(sha256.New()), sig) == nil
		case "RS384":
			return rsa.VerifyPKCS1v15(pub, crypto.SHA384, digest(sha512.New384()), sig) == nil
		case "RS512":
			return rsa.VerifyPKCS1v15(pub, crypto.SHA512, digest(sha512.New()), sig) == nil
		}
	case *ecdsa.PublicKey:
		var h hash.Hash
		switch {
		case alg == "ES256" && pub.Curve == elliptic.P256():
			h = sha256.New()
		case alg == "ES384" && pub.Curve == elliptic.P384():
			h = sha512.New384()
		case alg == "ES512" && pub.Curve == elliptic.P521():
			h = sha512.New()
		default:
			return false
		}
		size := (pub.Curve.Params().BitSize + 7) / 8
		if len(sig) != 2*size {
			return false
		}
		r, s := new(big.Int).SetBytes(sig[:size]), new(big.Int).SetBytes(sig[size:])
		return ecdsa.Verify(pub, digest(h), r, s)
	}
	return false
}
