package pod

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/toolgate/toolgate/internal/providers/sandbox"
)

// attempt is everything this process knows of one attempt's sandbox, by
// attempt key, under the provider's mu: one record from its first pod to
// its Discard or its call's Release, which forget it whole (a list of
// maps to clear by hand had let a Release keep what a Discard dropped).
//
// Its phases, read from the record (never stored twice):
//
//	prepared  a pod made or reserved ahead of the attempt's boundary
//	          (Prepare), named for Release, handed nothing;
//	followed  a follower hands the pod the call once the boundary names it
//	          and reads its frame (adopt: from Run, or Prepare's pod);
//	done      the follower has its answer (frame or failure).
//
// A warm pod's attempt also has its claim (warm.go) and, prepared, a
// connection greeted ahead of the hand-over (greet.go); remade marks an
// attempt whose unsealed pod this process deleted to make again.
type attempt struct {
	prepared *corev1.Pod
	follower *follower
	claim    *pendingClaim
	greeting *greeting
	remade   bool
}

// attemptPhase is where an attempt is in its life (attempt).
type attemptPhase int

const (
	phaseNone attemptPhase = iota // nothing of it here
	phasePrepared
	phaseFollowed
	phaseDone
)

// phase is the attempt's phase; a nil attempt has none.
func (a *attempt) phase() attemptPhase {
	switch {
	case a == nil || (a.follower == nil && a.prepared == nil):
		return phaseNone
	case a.follower == nil:
		return phasePrepared
	case isDone(a.follower):
		return phaseDone
	}
	return phaseFollowed
}

// empty reports whether the record holds nothing any more.
func (a *attempt) empty() bool {
	return a.prepared == nil && a.follower == nil && a.claim == nil && a.greeting == nil && !a.remade
}

// attemptLocked is the record of the attempt with key, made if there is
// none (p.mu held).
func (p *Provider) attemptLocked(key string) *attempt {
	if p.attempts == nil {
		p.attempts = map[string]*attempt{}
	}
	a := p.attempts[key]
	if a == nil {
		a = &attempt{}
		p.attempts[key] = a
	}
	return a
}

// tidyLocked drops the attempt's record once it holds nothing (p.mu held).
func (p *Provider) tidyLocked(key string) {
	if a := p.attempts[key]; a != nil && a.empty() {
		delete(p.attempts, key)
	}
}

// forget removes the records of the attempts keep selects, whole, and
// returns them: what they still hold (a greeting's connection) is the
// caller's to close.
func (p *Provider) forget(keep func(key string) bool) map[string]*attempt {
	p.mu.Lock()
	defer p.mu.Unlock()
	gone := map[string]*attempt{}
	for key, a := range p.attempts {
		if keep(key) {
			gone[key] = a
			delete(p.attempts, key)
		}
	}
	return gone
}

// ofCall selects the attempts of the call with uid.
func ofCall(uid types.UID) func(key string) bool {
	return func(key string) bool { return sandbox.OfCall(key, uid) }
}

// followed is the attempt's follower, nil when it has none (or no record).
func (a *attempt) followed() *follower {
	if a == nil {
		return nil
	}
	return a.follower
}
