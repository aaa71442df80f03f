package pod

import (
	"context"

	"github.com/toolgate/toolgate/internal/pipeline"
)

// The provider's life in the manager's process: what of it runs here (the
// followers, the warm pools' sweeper, fills and claims) runs under its
// life, which Stop ends and waits out; its pods stay, for a successor to
// adopt.

// errStopped answers every Run and Prepare once the provider was stopped.
var errStopped = pipeline.Fail(pipeline.CodeSandboxUnavailable, "the pod sandbox provider was stopped (its scope was disposed)")

func (p *Provider) isStopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopped
}

// lifeContext is what the provider's own work in this process runs under
// (its followers): ended by Stop.
func (p *Provider) lifeContext() context.Context {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.life == nil {
		p.life, p.endLife = context.WithCancel(context.Background())
		if p.stopped {
			p.endLife()
		}
	}
	return p.life
}

// Stop ends the provider's work in this process and waits for it to be
// gone: the followers (their pods stay, for a successor to adopt), the
// sweeper, the warm pods being started and claimed; Run and Prepare start
// nothing afterwards (sandbox_unavailable). The warm pods stay too: a
// restarted manager claims them, or releases them once idle.
func (p *Provider) Stop(ctx context.Context) error {
	p.mu.Lock()
	p.stopped = true
	if p.endLife != nil {
		p.endLife()
	}
	var following []chan struct{}
	for _, a := range p.attempts {
		if a.follower != nil {
			following = append(following, a.follower.done)
		}
	}
	p.mu.Unlock()
	for _, done := range following {
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.warm.mu.Lock()
	started := p.warm.started
	if started {
		close(p.warm.stop)
		p.warm.started = false
	}
	p.warm.stopped = true
	for key, r := range p.warm.refills {
		r.timer.Stop()
		delete(p.warm.refills, key)
	}
	done := p.warm.done
	p.warm.mu.Unlock()
	p.mu.Lock()
	var greeted []string
	for key, a := range p.attempts {
		if a.greeting != nil {
			greeted = append(greeted, key)
		}
	}
	p.mu.Unlock()
	for _, key := range greeted {
		p.dropGreeting(key, nil)
	}
	gone := make(chan struct{})
	go func() {
		if started {
			<-done
		}
		p.warm.fills.Wait()
		close(gone)
	}()
	select {
	case <-gone:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
