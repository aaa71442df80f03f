package pipeline

import (
	"context"
	"time"
)

// Run is the in-memory driver for one call: it steps the call from its
// durable tool/call to its durable tool/result and returns the one result.
// Waiting steps sleep (approvals pending, retry backoff, reattaching bodies)
// and stop sleeping when ctx is cancelled, so a cancelled call still settles.
func (p *Pipeline) Run(ctx context.Context, req Request) Result {
	st := NewState(req)
	return p.Resume(ctx, st, nil)
}

// Resume steps st until it is done. persist, if set, is called after every
// boundary crossed (a durable driver writes the state there); returning an
// error stops the driver, as a crash would, and Resume returns the zero
// Result.
func (p *Pipeline) Resume(ctx context.Context, st *State, persist func(*State) error) Result {
	for {
		progress, wait := p.Step(ctx, st)
		switch progress {
		case Finished:
			return *st.Result
		case Advanced:
			if persist != nil {
				if err := persist(st); err != nil {
					return Result{}
				}
			}
		case Waiting:
			sleep(ctx, wait)
		}
	}
}

// sleep waits for d or until ctx is done; a cancelled caller must not wait
// for a backoff to learn its call settled.
func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
