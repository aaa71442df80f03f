package gateway

import "sync"

// limiter bounds the tools/call requests each identity has in flight.
type limiter struct {
	max      int
	mu       sync.Mutex
	inFlight map[string]int
}

func newLimiter(maxPerIdentity int) *limiter {
	return &limiter{max: maxPerIdentity, inFlight: map[string]int{}}
}

// acquire takes a slot for user; false when user holds them all. The
// returned func gives the slot back.
func (l *limiter) acquire(user string) (func(), bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inFlight[user] >= l.max {
		return nil, false
	}
	l.inFlight[user]++
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.inFlight[user]--; l.inFlight[user] <= 0 {
			delete(l.inFlight, user)
		}
	}, true
}
