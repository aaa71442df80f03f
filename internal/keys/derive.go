package keys

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// Every use of the manager's key, by label: each use gets a key of its
// own, derived from the manager's (no two uses can be confused, and a
// derived key reveals nothing of the manager's), and a reader finds every
// use in this list. The labels and constructions are compatibility
// contracts: pods, questions and audit records made before an upgrade
// must verify after it (TestDerivationsAreStable).
//
// The pod sandbox's channel itself (a call handed to a tool pod, its frame
// back) is keyed with the manager's key through an exchange with each
// runner's one-time key: the runner package owns that protocol.
const (
	// UsePodSeal seals the tool pods the manager made (their namespace,
	// name and UID): PodSeal.
	UsePodSeal = "toolgate.dev/seal"
	// UseQuestion seals what an approver reads on an ApprovalRequest.
	UseQuestion = "toolgate.dev/question"
	// UseArguments digests a call's arguments (an ApprovalRequest's
	// annotation, an audit record's field).
	UseArguments = "toolgate.dev/arguments"
	// UseResult digests a call's result in an audit record.
	UseResult = "toolgate.dev/result"
	// UseKeyID names the key that made a digest or seal: KeyID.
	UseKeyID = "toolgate.dev/key-id"
	// useGrant signs the egress proxy's grants: GrantKey.
	useGrant = "toolgate egress grant v1"
)

// derived is the key of one use: SHA-256 of the use's label and the
// manager's key.
func derived(secret []byte, use string) []byte {
	key := sha256.Sum256(append([]byte(use+"\x00"), secret...))
	return key[:]
}

// MAC is HMAC-SHA256 of parts under use's key. Each part is length
// prefixed, so that no two lists of parts share a text.
func MAC(secret []byte, use string, parts ...string) []byte {
	m := hmac.New(sha256.New, derived(secret, use))
	for _, part := range parts {
		fmt.Fprintf(m, "%d:%s", len(part), part)
	}
	return m.Sum(nil)
}

// Digest is MAC as toolgate's objects and records show it:
// "hmac-sha256:<hex>".
func Digest(secret []byte, use string, parts ...string) string {
	return "hmac-sha256:" + hex.EncodeToString(MAC(secret, use, parts...))
}

// KeyID names a key without revealing it: which key made a digest or a
// seal, so that a reader compares digests only under one key.
func KeyID(secret []byte) string {
	return "key-" + hex.EncodeToString(MAC(secret, UseKeyID)[:8])
}

// PodSeal is the seal of the pod with namespace, name and uid (the one
// thing of a pod its creator cannot choose is its UID).
func PodSeal(secret []byte, namespace, name, uid string) []byte {
	m := hmac.New(sha256.New, derived(secret, UsePodSeal))
	m.Write([]byte(namespace + "\x00" + name + "\x00" + uid))
	return m.Sum(nil)
}

// GrantKey is the key the egress proxy checks the manager's grants with
// (HKDF-SHA256): the proxy holds it, never the manager's key
// (WriteGrantKeys).
func GrantKey(secret []byte) []byte {
	out, err := hkdf.Key(sha256.New, secret, nil, useGrant, 32)
	if err != nil {
		panic(err) // 32 bytes of HKDF-SHA256 cannot fail
	}
	return out
}
